// The demo page: every number it shows comes from the server, which
// decides every request with spigot (httplimit in front of a store). The
// page asks, draws the answers, and keeps only its own tallies of them.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  // Each page has limits of its own, unless the address names them.
  const key = params.get("key") || "page-" + Math.random().toString(36).slice(2, 12);

  // The algorithms, in the server's order, and what the page says of each.
  const ALGOS = {
    "token-bucket": { title: "The token bucket", room: "tokens", refill: "empty to full",
      about: "A bucket of tokens that refills at the rate: bursts up to its capacity, then the rate on average." },
    "fixed-window": { title: "The fixed window", room: "left", refill: "window",
      about: "The capacity in each window, the windows end to end: up to twice that across a boundary." },
    "sliding-window": { title: "The sliding window counter", room: "left", refill: "window",
      about: "Counts this window's requests and the last window's, weighted by how much of it a sliding window still covers: it smooths the boundary." },
    "sliding-log": { title: "The sliding window log", room: "left", refill: "window",
      about: "Keeps the instant of every request of the last window: never more than the capacity in any window, exactly." },
    "leaky-bucket": { title: "The leaky bucket", room: "free places", refill: "full to empty",
      about: "A queue that lets requests leave at the rate, evenly spaced: an admitted request waits its turn, a full queue denies." },
  };
  const NAMES = Object.keys(ALGOS);
  const ALL_ABOUT = "The same requests go to each of the five: compare what each admits, and when.";

  const states = {}; // algo → the server's last state
  const tally = {}; // algo → {admitted, denied}
  const turns = {}; // algo → the delays of its admitted requests, in ms
  const events = []; // {at, algo, allowed, burst}: the last ten seconds of requests
  let bursts = 0; // the bursts sent so far, which number them
  const WINDOW = 10000;

  function clear() {
    for (const a of NAMES) {
      tally[a] = { admitted: 0, denied: 0 };
      turns[a] = [];
    }
    events.length = 0;
  }
  clear();

  function algo() {
    return $("algo").value;
  }
  function active() {
    return algo() === "all" ? NAMES : [algo()];
  }

  function api(path, body) {
    const init = { headers: { "X-Demo-Key": key, Accept: "application/json" } };
    if (body !== undefined) {
      init.method = "POST";
      init.body = new URLSearchParams(body);
    }
    return fetch(path, init);
  }

  // remainingOf reads what a limit has left from a RateLimit header:
  // "fixed-window";r=3;t=7.
  function remainingOf(header) {
    const m = /;r=(\d+)/.exec(header || "");
    return m ? Number(m[1]) : null;
  }

  function seconds(ms) {
    if (ms < 1000) return ms + " ms";
    const s = ms / 1000;
    if (s < 120) return (Number.isInteger(s) ? s : s.toFixed(1)) + " s";
    if (s < 7200) return (s / 60).toFixed(s % 60 ? 1 : 0) + " min";
    return (s / 3600).toFixed(1) + " h";
  }

  function applyMeta(st) {
    $("store").textContent = st.store;
    if (st.circuit) {
      $("hybrid").hidden = false;
      $("path").textContent = st.path === "remote" ? "Redis" : st.path === "local" ? "the local fallback" : st.path;
      $("circuit").textContent = st.circuit;
    }
    $("degraded").hidden = !st.degraded;
  }

  // sendTo makes one request of cost to one algorithm's limit, through
  // the limiter, and returns whether it was admitted. A request of a
  // burst carries its number, so that the strip draws the burst as one
  // bar.
  async function sendTo(name, cost, burst) {
    let res;
    try {
      res = await api("/api/request", { algo: name, cost: String(cost) });
    } catch (e) {
      $("last").textContent = "The demo server did not answer: " + e.message;
      return null;
    }
    const header = res.headers.get("RateLimit");
    const retry = res.headers.get("Retry-After");
    const reply = await res.json().catch(() => ({}));
    if (res.status !== 200 && res.status !== 429) {
      $("last").textContent = res.status + ": " + (reply.error || res.statusText);
      return null;
    }
    const allowed = res.status === 200;
    allowed ? tally[name].admitted++ : tally[name].denied++;
    if (allowed && name === "leaky-bucket") turns[name].push(reply.delay_ms);
    events.push({ at: performance.now(), algo: name, allowed, burst });
    const r = remainingOf(header);
    if (r !== null && states[name]) states[name].remaining = r;
    let text = name + ": " + res.status + (allowed ? " admitted" : " denied");
    if (allowed && reply.delay_ms > 0) text += " · its turn in " + seconds(reply.delay_ms);
    if (header) text += " · RateLimit: " + header;
    if (retry) text += " · Retry-After: " + retry;
    if (!allowed && reply.retry_after_ms === -1) text += " · never: the cost is above the capacity";
    if (reply.path && reply.path !== "memory") text += " · by " + reply.path;
    $("last").textContent = text;
    draw();
    return allowed;
  }

  // send makes the same request to each algorithm on show.
  function send(cost, burst) {
    return Promise.all(active().map((a) => sendTo(a, cost, burst)));
  }

  async function refresh() {
    try {
      const res = await api("/api/states");
      if (!res.ok) return;
      const list = await res.json();
      for (const st of list) states[st.algo] = st;
      applyMeta(list[0]);
      draw();
    } catch (e) {
      // The server stopped; the next poll tries again.
    }
  }

  function buildSlots(capacity) {
    const slots = $("slots");
    if (slots.children.length === capacity) return;
    slots.replaceChildren();
    for (let i = 0; i < capacity; i++) {
      const s = document.createElement("div");
      s.className = "slot";
      s.appendChild(document.createElement("i"));
      slots.appendChild(s);
    }
    slots.setAttribute("aria-label", capacity + " slots");
  }

  // room returns what the limit has left: whole, from the last answer, and
  // a bucket's fraction of the next one from the state.
  function room(st) {
    return Math.max(st.remaining, Math.min(st.tokens, st.remaining + 0.999));
  }

  // turnsText lists an algorithm's delays, shortest first.
  function turnsText(name) {
    const t = turns[name].slice().sort((a, b) => a - b);
    if (!t.length) return name === "leaky-bucket" ? "none yet" : "none";
    const shown = t.slice(-12).map(seconds);
    return (t.length > 12 ? "…, " : "") + shown.join(", ");
  }

  // runs lists times, a run of equal ones once with its count: "980 ms ×10".
  function runs(ms) {
    const out = [];
    for (let i = 0; i < ms.length; ) {
      let j = i;
      while (j < ms.length && ms[j] === ms[i]) j++;
      out.push(seconds(ms[i]) + (j - i > 1 ? " ×" + (j - i) : ""));
      i = j;
    }
    return out.join(", ");
  }

  function drawSingle(name) {
    const st = states[name];
    const info = ALGOS[name];
    $("room-label").textContent = info.room;
    $("refill-label").textContent = info.refill;
    $("admitted").textContent = tally[name].admitted;
    $("denied").textContent = tally[name].denied;
    const turnsOn = name === "leaky-bucket";
    $("turns").hidden = !turnsOn;
    if (turnsOn) $("turns").textContent = "Turns given: " + turnsText(name);
    if (!st) return;
    buildSlots(st.capacity);
    const slots = $("slots").children;
    const r = room(st);
    for (let i = 0; i < slots.length; i++) {
      const fill = Math.max(0, Math.min(1, r - i));
      slots[i].firstChild.style.height = (fill * 100).toFixed(1) + "%";
      slots[i].classList.toggle("next", fill > 0 && fill < 1);
    }
    $("tokens").textContent = st.remaining + " / " + st.capacity;
    $("refill").textContent = seconds(st.refill_ms);
    let detail = st.detail;
    if (st.log_ms && st.log_ms.length) detail += ". Entries leave in " + runs(st.log_ms);
    $("detail").textContent = detail;
  }

  function buildTable() {
    const body = $("algos").tBodies[0];
    for (const name of NAMES) {
      const tr = document.createElement("tr");
      tr.id = "row-" + name;
      for (const c of ["name", "room", "state", "admitted", "denied", "waits"]) {
        const td = document.createElement(c === "name" ? "th" : "td");
        td.className = c;
        tr.appendChild(td);
      }
      tr.firstChild.textContent = ALGOS[name].title.replace(/^The /, "");
      body.appendChild(tr);
    }
  }

  function drawTable() {
    for (const name of NAMES) {
      const row = $("row-" + name);
      const st = states[name];
      row.querySelector(".admitted").textContent = tally[name].admitted;
      row.querySelector(".denied").textContent = tally[name].denied;
      row.querySelector(".waits").textContent = name === "leaky-bucket" ? turnsText(name) : "at once";
      if (!st) continue;
      row.querySelector(".room").textContent = st.remaining + " / " + st.capacity;
      row.querySelector(".state").textContent = st.detail;
    }
  }

  function draw() {
    const name = algo();
    const all = name === "all";
    $("single").hidden = all;
    $("all").hidden = !all;
    $("bucket-title").textContent = all ? "All five, side by side" : ALGOS[name].title;
    $("about").textContent = all ? ALL_ABOUT : ALGOS[name].about;
    drawTable();
    if (!all) drawSingle(name);
  }

  // drawStrip draws the last ten seconds of the algorithm on show: a
  // request alone as a tick, a burst as one bar where its first answer
  // came, its admitted part below its denied part, each as tall as its
  // share, with their counts.
  function drawStrip() {
    const now = performance.now();
    while (events.length && now - events[0].at > WINDOW) events.shift();
    const strip = $("strip");
    strip.querySelectorAll(".mark, .burst").forEach((m) => m.remove());
    const left = (at) => (100 - ((now - at) / WINDOW) * 100).toFixed(2) + "%";
    const groups = new Map(); // burst number → {at, admitted, denied}
    for (const e of events) {
      if (e.algo !== algo()) continue;
      if (e.burst !== undefined) {
        const g = groups.get(e.burst) || { at: e.at, admitted: 0, denied: 0 };
        e.allowed ? g.admitted++ : g.denied++;
        groups.set(e.burst, g);
        continue;
      }
      const m = document.createElement("span");
      m.className = "mark " + (e.allowed ? "ok" : "no");
      m.style.left = left(e.at);
      strip.appendChild(m);
    }
    // A burst's counts are hidden when the next burst's would cover them.
    const width = strip.clientWidth;
    const ordered = [...groups].sort((a, b) => a[1].at - b[1].at);
    ordered.forEach(([, g], k) => {
      const next = ordered[k + 1];
      g.crowded = next !== undefined && ((next[1].at - g.at) / WINDOW) * width < 56;
    });
    for (const [n, g] of ordered) {
      const bar = document.createElement("span");
      bar.className = "burst" + (g.crowded ? " crowded" : "");
      bar.id = "burst-" + n;
      bar.dataset.admitted = g.admitted;
      bar.dataset.denied = g.denied;
      bar.style.left = left(g.at);
      bar.setAttribute("role", "img");
      bar.setAttribute("aria-label", `a burst of ${g.admitted + g.denied}: ${g.admitted} admitted, ${g.denied} denied`);
      for (const [cls, count] of [["ok", g.admitted], ["no", g.denied]]) {
        if (!count) continue;
        const part = document.createElement("i");
        part.className = cls;
        part.style.flexGrow = count;
        bar.appendChild(part);
      }
      const label = document.createElement("b");
      for (const [cls, text] of [["ok", g.admitted], ["", " / "], ["no", g.denied]]) {
        const span = document.createElement("span");
        span.className = cls;
        span.textContent = text;
        label.appendChild(span);
      }
      bar.appendChild(label);
      strip.appendChild(bar);
    }
    requestAnimationFrame(drawStrip);
  }

  function cost() {
    const n = Number($("cost").value);
    return Number.isInteger(n) && n >= 0 ? n : 1;
  }

  async function configure(capacity, rate) {
    const res = await api("/api/config", { capacity: String(capacity), rate });
    const body = await res.json().catch(() => ({}));
    if (!res.ok) {
      $("config-error").textContent = body.error || res.statusText;
      return false;
    }
    $("config-error").textContent = "";
    await refresh();
    return true;
  }

  // startAgain makes every limit whole again and forgets the tallies.
  async function startAgain() {
    const res = await api("/api/reset", {});
    if (!res.ok) return;
    clear();
    await refresh();
  }

  $("algo").addEventListener("change", draw);
  $("config").addEventListener("submit", (e) => {
    e.preventDefault();
    configure($("capacity").value, $("rate").value);
  });
  $("one").addEventListener("click", () => send(cost()));
  $("burst").addEventListener("click", async () => {
    const b = $("burst");
    b.disabled = true;
    const burst = ++bursts;
    await Promise.all(Array.from({ length: 10 }, () => send(cost(), burst)));
    b.disabled = false;
  });
  $("reset").addEventListener("click", startAgain);

  let traffic = null;
  $("traffic").addEventListener("input", () => {
    const per = Number($("traffic").value);
    $("traffic-out").textContent = per;
    clearInterval(traffic);
    traffic = per > 0 ? setInterval(() => send(cost()), 1000 / per) : null;
  });

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // The seed's worked example, on this page's token bucket: b = 10,
  // r = 1/s, 15 requests at once, then 1 a second, counted from when the
  // burst's answers are all in (so that each steady request comes a whole
  // second after the bucket was emptied).
  $("scenario").addEventListener("click", async () => {
    const button = $("scenario");
    const outcome = $("outcome");
    button.disabled = true;
    outcome.dataset.state = "running";
    $("traffic").value = 0;
    $("traffic").dispatchEvent(new Event("input"));
    $("algo").value = "token-bucket";
    $("algo").dispatchEvent(new Event("change"));
    $("capacity").value = 10;
    $("rate").value = "1/s";
    $("cost").value = 1;
    if (!(await configure(10, "1/s"))) {
      button.disabled = false;
      return;
    }
    await startAgain();
    outcome.textContent = "15 requests at once…";
    const n = ++bursts;
    const burst = await Promise.all(Array.from({ length: 15 }, () => sendTo("token-bucket", 1, n)));
    const admitted = burst.filter((a) => a === true).length;
    const denied = burst.filter((a) => a === false).length;
    const steady = 5;
    let steadyAdmitted = 0;
    const start = performance.now();
    for (let k = 1; k <= steady; k++) {
      outcome.textContent = `15 at once: ${admitted} admitted, ${denied} denied. Then 1 a second: ${steadyAdmitted} of ${k - 1} admitted…`;
      await sleep(start + k * 1000 - performance.now());
      if (await sendTo("token-bucket", 1)) steadyAdmitted++;
    }
    const asPredicted = admitted === 10 && denied === 5 && steadyAdmitted === steady;
    outcome.textContent = `15 at once: ${admitted} admitted, ${denied} denied; then ${steadyAdmitted} of ${steady} requests at 1 a second admitted. ` +
      (asPredicted ? "As the model says." : "Not what the model says: did other traffic use this bucket?");
    outcome.dataset.state = asPredicted ? "as-predicted" : "unexpected";
    button.disabled = false;
  });

  buildTable();
  draw();
  refresh();
  setInterval(refresh, 100);
  requestAnimationFrame(drawStrip);
})();

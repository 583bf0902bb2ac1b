// The demo page: every number it shows comes from the server, which
// decides every request with spigot (httplimit in front of a store). The
// page asks, draws the answers, and keeps only its own tallies of them.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  // Each page has a bucket of its own, unless the address names one.
  const key = params.get("key") || "page-" + Math.random().toString(36).slice(2, 12);

  const state = { capacity: 0, tokens: 0, remaining: 0, per_second: 1, refill_ms: 0 };
  const tally = { admitted: 0, denied: 0 };
  const events = []; // {at, allowed}: the last ten seconds of requests
  const WINDOW = 10000;

  function api(path, body) {
    const init = { headers: { "X-Demo-Key": key, Accept: "application/json" } };
    if (body !== undefined) {
      init.method = "POST";
      init.body = new URLSearchParams(body);
    }
    return fetch(path, init);
  }

  // parseRateLimit reads the RateLimit header's member for the demo's
  // bucket: "demo";r=3;t=7.
  function parseRateLimit(header) {
    if (!header) return null;
    const m = /"demo";r=(\d+);t=(\d+)/.exec(header);
    return m ? { r: Number(m[1]), t: Number(m[2]) } : null;
  }

  function seconds(ms) {
    if (ms < 1000) return ms + " ms";
    const s = ms / 1000;
    if (s < 120) return (Number.isInteger(s) ? s : s.toFixed(1)) + " s";
    if (s < 7200) return (s / 60).toFixed(s % 60 ? 1 : 0) + " min";
    return (s / 3600).toFixed(1) + " h";
  }

  function applyState(st) {
    Object.assign(state, st);
    $("store").textContent = st.store;
    if (st.circuit) {
      $("hybrid").hidden = false;
      $("path").textContent = st.path === "remote" ? "Redis" : st.path === "local" ? "the local fallback" : st.path;
      $("circuit").textContent = st.circuit;
    }
    $("degraded").hidden = !st.degraded;
    draw();
  }

  // send makes one request of cost tokens, through the limiter, and
  // returns whether it was admitted.
  async function send(cost) {
    let res;
    try {
      res = await api("/api/request", { cost: String(cost) });
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
    allowed ? tally.admitted++ : tally.denied++;
    events.push({ at: performance.now(), allowed });
    const rl = parseRateLimit(header);
    if (rl) state.remaining = rl.r;
    let text = res.status + (allowed ? " admitted" : " denied");
    if (header) text += " · RateLimit: " + header;
    if (retry) text += " · Retry-After: " + retry;
    if (!allowed && reply.retry_after_ms === -1) text += " · never: the cost is above the capacity";
    if (reply.path && reply.path !== "memory") text += " · by " + reply.path;
    $("last").textContent = text;
    draw();
    return allowed;
  }

  async function refresh() {
    try {
      const res = await api("/api/state");
      if (res.ok) applyState(await res.json());
    } catch (e) {
      // The server stopped; the next poll tries again.
    }
  }

  function buildSlots() {
    const slots = $("slots");
    if (slots.children.length === state.capacity) return;
    slots.replaceChildren();
    for (let i = 0; i < state.capacity; i++) {
      const s = document.createElement("div");
      s.className = "slot";
      s.appendChild(document.createElement("i"));
      slots.appendChild(s);
    }
    slots.setAttribute("aria-label", state.capacity + " token slots");
  }

  function draw() {
    buildSlots();
    const slots = $("slots").children;
    // The whole tokens come from the last answer (RateLimit's r, or the
    // state's), the fraction of the next one from the state's reset time.
    const tokens = Math.max(state.remaining, Math.min(state.tokens, state.remaining + 0.999));
    for (let i = 0; i < slots.length; i++) {
      const fill = Math.max(0, Math.min(1, tokens - i));
      slots[i].firstChild.style.height = (fill * 100).toFixed(1) + "%";
      slots[i].classList.toggle("next", fill > 0 && fill < 1);
    }
    $("tokens").textContent = state.remaining + " / " + state.capacity;
    $("admitted").textContent = tally.admitted;
    $("denied").textContent = tally.denied;
    $("refill").textContent = seconds(state.refill_ms);
  }

  function drawStrip() {
    const now = performance.now();
    while (events.length && now - events[0].at > WINDOW) events.shift();
    const strip = $("strip");
    strip.querySelectorAll(".mark").forEach((m) => m.remove());
    for (const e of events) {
      const m = document.createElement("span");
      m.className = "mark " + (e.allowed ? "ok" : "no");
      m.style.left = (100 - ((now - e.at) / WINDOW) * 100).toFixed(2) + "%";
      strip.appendChild(m);
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
    applyState(body);
    return true;
  }

  async function refill() {
    const res = await api("/api/reset", {});
    if (res.ok) applyState(await res.json());
  }

  $("config").addEventListener("submit", (e) => {
    e.preventDefault();
    configure($("capacity").value, $("rate").value);
  });
  $("one").addEventListener("click", () => send(cost()));
  $("burst").addEventListener("click", async () => {
    const b = $("burst");
    b.disabled = true;
    await Promise.all(Array.from({ length: 10 }, () => send(cost())));
    b.disabled = false;
  });
  $("reset").addEventListener("click", refill);

  let traffic = null;
  $("traffic").addEventListener("input", () => {
    const per = Number($("traffic").value);
    $("traffic-out").textContent = per;
    clearInterval(traffic);
    traffic = per > 0 ? setInterval(() => send(cost()), 1000 / per) : null;
  });

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // The seed's worked example, on this page's bucket: b = 10, r = 1/s,
  // 15 requests at once, then 1 a second, counted from when the burst's
  // answers are all in (so that each steady request comes a whole second
  // after the bucket was emptied).
  $("scenario").addEventListener("click", async () => {
    const button = $("scenario");
    const outcome = $("outcome");
    button.disabled = true;
    outcome.dataset.state = "running";
    $("traffic").value = 0;
    $("traffic").dispatchEvent(new Event("input"));
    $("capacity").value = 10;
    $("rate").value = "1/s";
    $("cost").value = 1;
    if (!(await configure(10, "1/s"))) {
      button.disabled = false;
      return;
    }
    await refill();
    tally.admitted = tally.denied = 0;
    outcome.textContent = "15 requests at once…";
    const burst = await Promise.all(Array.from({ length: 15 }, () => send(1)));
    const admitted = burst.filter((a) => a === true).length;
    const denied = burst.filter((a) => a === false).length;
    const steady = 5;
    let steadyAdmitted = 0;
    const start = performance.now();
    for (let k = 1; k <= steady; k++) {
      outcome.textContent = `15 at once: ${admitted} admitted, ${denied} denied. Then 1 a second: ${steadyAdmitted} of ${k - 1} admitted…`;
      await sleep(start + k * 1000 - performance.now());
      if (await send(1)) steadyAdmitted++;
    }
    const asPredicted = admitted === 10 && denied === 5 && steadyAdmitted === steady;
    outcome.textContent = `15 at once: ${admitted} admitted, ${denied} denied; then ${steadyAdmitted} of ${steady} requests at 1 a second admitted. ` +
      (asPredicted ? "As the model says." : "Not what the model says: did other traffic use this bucket?");
    outcome.dataset.state = asPredicted ? "as-predicted" : "unexpected";
    button.disabled = false;
  });

  refresh();
  setInterval(refresh, 100);
  requestAnimationFrame(drawStrip);
})();

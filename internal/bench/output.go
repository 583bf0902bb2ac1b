package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// notRepresentative is what every output of a run on miniredis says.
const notRepresentative = "miniredis: not representative"

// WriteTable writes r to w as a table for a terminal, in one Write.
//
// Above the table it writes the machine and the server, then, when the
// server is miniredis, a line starting "miniredis: not representative",
// and, when the run was interrupted, a line saying that the table holds
// only the cells measured so far.
//
// The table has one row per cell, in the order they ran, with the
// columns store, conc, keys, ops/s, p50, p90, p99, p99.9, max,
// allocs/op, errors, admitted, denied and "% ceiling" (the cell's
// throughput as a percentage of the server's ceiling without and with
// pipelining, "41% / 12%", or "-" where there is none). When a cell ran
// with -deny, the column "denied/asked" follows denied: the share of
// requests denied and the share asked, "19.9%/20%". When a cell has a
// warning, the column warn holds a marker for each ("C B"), or "-". When
// a cell ran on a cluster, the columns primaries (each primary's share
// of the scripts, "p1 34% p2 33% p3 33%") and redirects/op follow; when
// a cell has a note, or the server is miniredis, a last column note holds
// it (on miniredis every row's note says "miniredis: not
// representative"). A raw baseline's row comes right under the row of
// its store at the same concurrency and key count, its name indented
// ("  redis raw"). Rates are written with three significant digits
// ("48.2k", "1.23M") and durations compactly ("35ns", "812µs", "1.2ms").
//
// Below the table it writes the ceilings, when there are any, as a
// table of tool, -c, --threads, -P, ops/s, the server's main thread's
// CPU ("server cpu", "97%"), saturated ("yes" or "no"), and warn when a
// ceiling has a warning.
//
// Last, when any row has a warning, a footnote for each marker used:
// "warnings:", then one line for each, its marker, its code and what it
// means (see Warning), with the worst figure among the rows.
//
// It returns the error of the Write, wrapped.
func WriteTable(w io.Writer, r *Report) error {
	var buf bytes.Buffer
	if r.Machine != "" {
		fmt.Fprintf(&buf, "machine: %s\n", r.Machine)
	}
	if r.Server != "" {
		fmt.Fprintf(&buf, "server:  %s\n", r.Server)
	}
	if r.Miniredis {
		fmt.Fprintf(&buf, "%s: the server is the embedded miniredis; no figure below says anything of a real server\n", notRepresentative)
	}
	if r.Interrupted {
		fmt.Fprintf(&buf, "interrupted: the run was stopped before every cell ran; the table holds the %s measured so far\n", plural(len(r.Cells), "cell"))
	}
	if buf.Len() > 0 {
		buf.WriteByte('\n')
	}

	cells := tableOrder(r.Cells)
	cluster, noted, deny, warned := false, r.Miniredis, false, false
	for _, c := range cells {
		cluster = cluster || len(c.Primaries) > 0
		noted = noted || c.Note != ""
		deny = deny || c.DenyAsked > 0
		warned = warned || len(c.Warnings) > 0
	}
	header := []string{"store", "conc", "keys", "ops/s", "p50", "p90", "p99", "p99.9", "max",
		"allocs/op", "errors", "admitted", "denied"}
	if deny {
		header = append(header, "denied/asked")
	}
	header = append(header, "% ceiling")
	if warned {
		header = append(header, "warn")
	}
	if cluster {
		header = append(header, "primaries", "redirects/op")
	}
	if noted {
		header = append(header, "note")
	}
	var table [][]string
	table = append(table, header)
	for _, c := range cells {
		name := c.Store
		if c.Baseline {
			name = "  " + name
		}
		row := []string{
			name,
			strconv.Itoa(c.Concurrency),
			strconv.Itoa(c.Keys),
			formatRate(c.Throughput),
			FormatDuration(c.Latency.P50),
			FormatDuration(c.Latency.P90),
			FormatDuration(c.Latency.P99),
			FormatDuration(c.Latency.P999),
			FormatDuration(c.Latency.Max),
			strconv.FormatFloat(c.AllocsPerOp, 'f', 1, 64),
			strconv.FormatInt(c.Errors, 10),
			strconv.FormatInt(c.Admitted, 10),
			strconv.FormatInt(c.Denied, 10),
		}
		if deny {
			row = append(row, formatDenyShare(c))
		}
		row = append(row, formatCeilingPct(c.CeilingPct, c.CeilingPipelinedPct))
		if warned {
			row = append(row, markers(c.Warnings))
		}
		if cluster {
			row = append(row, formatPrimaries(c.Primaries), formatRedirects(c))
		}
		if noted {
			row = append(row, cellNote(r, c))
		}
		table = append(table, row)
	}
	writeTabular(&buf, table)

	if len(r.Ceilings) > 0 {
		buf.WriteString("\nceilings: the server's own throughput of EVALSHA of spigot's script, the best run at each depth\n")
		ceilingWarned := slices.ContainsFunc(r.Ceilings, func(c Ceiling) bool { return len(c.Warnings) > 0 })
		header := []string{"tool", "-c", "--threads", "-P", "ops/s", "server cpu", "saturated"}
		if ceilingWarned {
			header = append(header, "warn")
		}
		table = [][]string{header}
		for _, c := range r.Ceilings {
			saturated := "no"
			if c.Saturated {
				saturated = "yes"
			}
			row := []string{c.Tool, strconv.Itoa(c.Concurrency), strconv.Itoa(max(c.Threads, 1)), strconv.Itoa(c.Pipeline),
				formatRate(c.Throughput), pct(c.ServerCPUPct), saturated}
			if ceilingWarned {
				row = append(row, markers(c.Warnings))
			}
			table = append(table, row)
		}
		writeTabular(&buf, table)
	}
	writeFootnotes(&buf, r)

	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("spigot: bench: table: %w", err)
	}
	return nil
}

// The markers of the warnings in a table, by code, in the order of their
// footnotes.
var warningMarkers = []struct{ code, marker string }{
	{AboveCeiling, "C"},
	{MachineBusy, "B"},
	{DenyShareOff, "D"},
	{CeilingUnsaturated, "U"},
}

// markers returns the markers of ws, space-separated, in the order of
// warningMarkers, or "-" for none; "?" stands for a code it does not
// know.
func markers(ws []Warning) string {
	var out []string
	for _, m := range warningMarkers {
		if slices.ContainsFunc(ws, func(w Warning) bool { return w.Code == m.code }) {
			out = append(out, m.marker)
		}
	}
	if slices.ContainsFunc(ws, func(w Warning) bool {
		return !slices.ContainsFunc(warningMarkers, func(m struct{ code, marker string }) bool { return m.code == w.Code })
	}) {
		out = append(out, "?")
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, " ")
}

// writeFootnotes writes, when any cell or ceiling of r has a warning, a
// line "warnings:" and one line for each marker used, with the worst
// figure of the rows that have it.
func writeFootnotes(buf *bytes.Buffer, r *Report) {
	var notes []string
	for _, m := range warningMarkers {
		var n int
		var worst float64
		see := func(ws []Warning, figure float64) {
			if slices.ContainsFunc(ws, func(w Warning) bool { return w.Code == m.code }) {
				n++
				worst = max(worst, figure)
			}
		}
		for _, c := range r.Cells {
			var figure float64
			switch m.code {
			case AboveCeiling:
				figure = c.CeilingPct
				if c.Pipelines {
					figure = c.CeilingPipelinedPct
				}
			case MachineBusy:
				if c.OtherCPUPct != nil {
					figure = *c.OtherCPUPct
				}
			case DenyShareOff:
				figure = 100 * math.Abs(c.DenyShare-c.DenyAsked)
			}
			see(c.Warnings, figure)
		}
		for _, c := range r.Ceilings {
			var figure float64
			switch m.code {
			case MachineBusy:
				if c.OtherCPUPct != nil {
					figure = *c.OtherCPUPct
				}
			case CeilingUnsaturated:
				figure = 100 - c.ServerCPUPct // the farthest from a core
			}
			see(c.Warnings, figure)
		}
		if n == 0 {
			continue
		}
		var text string
		switch m.code {
		case AboveCeiling:
			text = fmt.Sprintf("above its own ceiling (unpipelined for go-redis, pipelined for valkey-go and rueidis; up to %s): that ceiling is not the server's limit, or the load changed between the runs", pct(worst))
		case MachineBusy:
			text = fmt.Sprintf("other work took %s or more of the machine's CPUs while it ran (up to %s): its figures say as much of that work as of spigot", pct(BusyPct), pct(worst))
		case DenyShareOff:
			text = fmt.Sprintf("the share denied is more than %s from -deny's (up to %s points off; see denied/asked)", sharePct(DenyTolerance), strconv.FormatFloat(worst, 'f', 1, 64))
		case CeilingUnsaturated:
			text = fmt.Sprintf("the server's main thread used less than %s of a core (as little as %s): the client set that ceiling, a floor of the server's", pct(SaturatedPct), pct(100-worst))
		}
		notes = append(notes, fmt.Sprintf("  %s  %s: %s", m.marker, m.code, text))
	}
	if len(notes) == 0 {
		return
	}
	buf.WriteString("\nwarnings:\n")
	for _, n := range notes {
		buf.WriteString(n + "\n")
	}
}

// formatDenyShare returns "19.9%/20%": the share denied and the share
// asked, or "-" for a cell without -deny.
func formatDenyShare(c Cell) string {
	if c.DenyAsked == 0 {
		return "-"
	}
	return sharePct(c.DenyShare) + "/" + sharePct(c.DenyAsked)
}

// writeTabular writes rows aligned in columns two spaces apart, with no
// space at the end of a line.
func writeTabular(buf *bytes.Buffer, rows [][]string) {
	var aligned bytes.Buffer
	tw := tabwriter.NewWriter(&aligned, 0, 8, 2, ' ', 0)
	for _, row := range rows {
		// A tabwriter cannot fail writing to a bytes.Buffer.
		_, _ = io.WriteString(tw, strings.Join(row, "\t")+"\n")
	}
	_ = tw.Flush()
	for line := range strings.Lines(aligned.String()) {
		buf.WriteString(strings.TrimRight(line, " \n"))
		buf.WriteByte('\n')
	}
}

// tableOrder returns cells in their order, except that each raw
// baseline comes right after the cell of its store at the same
// concurrency, key count and cost, when there is one.
func tableOrder(cells []Cell) []Cell {
	sameRun := func(store, baseline Cell) bool {
		return !store.Baseline && baseline.Baseline &&
			strings.TrimSuffix(baseline.Store, " raw") == store.Store &&
			store.Concurrency == baseline.Concurrency && store.Keys == baseline.Keys && store.Cost == baseline.Cost
	}
	placed := make([]bool, len(cells))
	out := make([]Cell, 0, len(cells))
	for i, c := range cells {
		if placed[i] {
			continue
		}
		if c.Baseline && slices.ContainsFunc(cells, func(s Cell) bool { return sameRun(s, c) }) {
			continue // written after its store
		}
		out = append(out, c)
		placed[i] = true
		for j, b := range cells {
			if !placed[j] && sameRun(c, b) {
				out = append(out, b)
				placed[j] = true
			}
		}
	}
	return out
}

// cellNote is the note column of c: its Note, after
// "miniredis: not representative" on miniredis.
func cellNote(r *Report, c Cell) string {
	if !r.Miniredis || strings.Contains(c.Note, notRepresentative) {
		return c.Note
	}
	if c.Note == "" {
		return notRepresentative
	}
	return notRepresentative + "; " + c.Note
}

// FormatDuration returns d with two or three significant digits in the
// largest unit that keeps it at 1 or more: "35ns", "1.5µs", "812µs",
// "1.2ms", "12ms", "2s"; "0s" for 0. A second or more is written in
// seconds ("75s").
func FormatDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d < 0:
		if d == math.MinInt64 {
			d++ // keep -d representable
		}
		return "-" + FormatDuration(-d)
	case d < time.Microsecond:
		return strconv.FormatInt(int64(d), 10) + "ns"
	}
	units := []struct {
		name  string
		scale time.Duration
	}{{"µs", time.Microsecond}, {"ms", time.Millisecond}, {"s", time.Second}}
	for i, u := range units {
		v := float64(d) / float64(u.scale)
		if v < 999.5 || i == len(units)-1 {
			return formatMantissa(v, 2) + u.name
		}
	}
	panic("unreachable")
}

// formatRate returns v with three significant digits and a k, M or G
// suffix: "812", "48.2k", "123k", "1.23M"; "0" for 0.
func formatRate(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	if v < 0 {
		return "-" + formatRate(-v)
	}
	for _, u := range []struct {
		suffix string
		scale  float64
	}{{"", 1}, {"k", 1e3}, {"M", 1e6}} {
		if m := v / u.scale; m < 999.5 {
			return formatMantissa(m, 3) + u.suffix
		}
	}
	return formatMantissa(v/1e9, 3) + "G"
}

// formatMantissa returns v with digits significant digits (all of its
// integer digits when it has more) and no trailing zero after the
// point: with 3 digits, "1.23", "12.3", "123", "1234", "0.5".
func formatMantissa(v float64, digits int) string {
	decimals := 0
	for d := digits - 1; d >= 1; d-- {
		// d decimals when v, rounded to d decimals, stays below
		// 10^(digits-d).
		if v < math.Pow(10, float64(digits-d))-0.5*math.Pow(10, -float64(d)) {
			decimals = d
			break
		}
	}
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// formatCeilingPct returns "41% / 12%", with "-" for a percentage of 0,
// or "-" when both are 0.
func formatCeilingPct(plain, pipelined float64) string {
	if plain == 0 && pipelined == 0 {
		return "-"
	}
	return formatPct(plain) + " / " + formatPct(pipelined)
}

func formatPct(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v > 0 && v < 0.5:
		return "<1%"
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + "%"
}

// formatPrimaries returns "p1 34% p2 33% p3 33%", or "-" for a cell
// that did not run on a cluster.
func formatPrimaries(shares []float64) string {
	if len(shares) == 0 {
		return "-"
	}
	parts := make([]string, len(shares))
	for i, s := range shares {
		parts[i] = "p" + strconv.Itoa(i+1) + " " + strconv.FormatFloat(s, 'f', 0, 64) + "%"
	}
	return strings.Join(parts, " ")
}

// formatRedirects returns c's redirects per request with three
// significant digits, or "-" for a cell that did not run on a cluster.
func formatRedirects(c Cell) string {
	if len(c.Primaries) == 0 {
		return "-"
	}
	return strconv.FormatFloat(c.RedirectsPerOp, 'g', 3, 64)
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// WriteJSON writes r to w as indented JSON, with the field names of
// Report's struct tags and a final newline. A Report with no cells has
// "cells": [] rather than null. Durations are integers of nanoseconds.
//
// It returns an error, wrapped, when a figure cannot be written in JSON
// (NaN or an infinity) or when the Write fails.
func WriteJSON(w io.Writer, r *Report) error {
	out := *r
	if out.Cells == nil {
		out.Cells = []Cell{}
	}
	b, err := json.MarshalIndent(&out, "", "  ")
	if err != nil {
		return fmt.Errorf("spigot: bench: json: %w", err)
	}
	b = append(b, '\n')
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("spigot: bench: json: %w", err)
	}
	return nil
}

// The plot's size: at the 96 dots per inch of a PNG, 1152×528 pixels.
const (
	plotWidth  = 12 * vg.Inch
	plotHeight = 5.5 * vg.Inch
)

// WritePlot writes r to the file at path as one image of two panels side
// by side: on the left the throughput (ops/s) of each cell against its
// concurrency, on the right its p99 latency against its concurrency,
// both axes on log scales, the concurrency ticks at the concurrencies
// measured. Each store is one line series (one per store and key count
// when several key counts ran), named in one legend right of the panels
// by the store, with " keys=N" when several key counts ran; each raw
// baseline is a dashed line of the colour of its store ("redis raw"). A
// cell with no throughput or no latency to show (0) is left out of its
// panel.
//
// The title above the panels says the machine and the server and, when
// so, "miniredis: not representative" and that the run was interrupted.
//
// The format is by the extension of path: ".svg" (SVG, 12×5.5 inches)
// or ".png" (PNG, 1152×528 pixels); any other is an error. WritePlot
// also returns an error when no cell has anything to show, and when the
// file cannot be written; it creates the file only once the image is
// drawn.
func WritePlot(path string, r *Report) error {
	ext := strings.ToLower(filepath.Ext(path))
	var c vg.CanvasWriterTo
	switch ext {
	case ".svg":
		c = vgsvg.New(plotWidth, plotHeight)
	case ".png":
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(
			vgimg.UseWH(plotWidth, plotHeight), vgimg.UseDPI(vgimg.DefaultDPI), vgimg.UseBackgroundColor(color.White))}
	default:
		return fmt.Errorf("spigot: bench: plot: want a .svg or .png file, got %q", path)
	}

	series := plotSeries(r.Cells)
	if len(series) == 0 {
		return fmt.Errorf("spigot: bench: plot: no cell has a throughput or a latency to plot")
	}
	throughput := newPanel("throughput", "ops/s", formatRate)
	latency := newPanel("p99 latency", "p99", func(v float64) string {
		return FormatDuration(time.Duration(math.Round(v)))
	})
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	var concurrencies []float64
	for _, s := range series {
		for _, p := range slices.Concat(s.throughput, s.p99) {
			concurrencies = append(concurrencies, p.X)
		}
		l1, err := addSeries(throughput, s, s.throughput)
		if err != nil {
			return fmt.Errorf("spigot: bench: plot: %w", err)
		}
		l2, err := addSeries(latency, s, s.p99)
		if err != nil {
			return fmt.Errorf("spigot: bench: plot: %w", err)
		}
		if l1 == nil {
			l1 = l2 // a series has points in one panel at least
		}
		legend.Add(s.label, l1...)
	}
	for _, p := range []*plot.Plot{throughput, latency} {
		setConcurrencyAxis(&p.X, concurrencies)
		setDecadeAxis(&p.Y)
	}

	// The title across the top, the legend down the right, the panels
	// side by side in what is left.
	dc := draw.New(c)
	titleHeight := drawTitle(dc, plotTitle(r))
	body := draw.Crop(dc, 0, 0, 0, -titleHeight)
	pad := vg.Points(12)
	legendWidth := legend.Rectangle(body).Size().X + 2*pad
	legend.Draw(draw.Crop(body, body.Size().X-legendWidth+pad, -pad, 0, -vg.Points(30)))
	panels := draw.Crop(body, 0, -legendWidth, 0, 0)
	tiles := draw.Tiles{
		Rows: 1, Cols: 2,
		PadX:   vg.Points(24),
		PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6),
	}
	plots := [][]*plot.Plot{{throughput, latency}}
	canvases := plot.Align(plots, tiles, panels)
	throughput.Draw(canvases[0][0])
	latency.Draw(canvases[0][1])

	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return fmt.Errorf("spigot: bench: plot: %w", err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("spigot: bench: plot: %w", err)
	}
	return nil
}

// A series is one line of the plot: a store, or its raw baseline, on
// one key count.
type series struct {
	label      string
	baseline   bool
	colour     color.Color
	shape      draw.GlyphDrawer
	throughput plotter.XYs
	p99        plotter.XYs
}

// plotSeries groups cells into series in the order the stores first
// ran, each sorted by concurrency, and gives a baseline the colour of
// its store. Points that a log scale cannot show (0) are left out, and
// so are series with no point left.
func plotSeries(cells []Cell) []*series {
	keyCounts := map[int]bool{}
	for _, c := range cells {
		keyCounts[c.Keys] = true
	}
	type id struct {
		store    string // the store's name, without " raw"
		keys     int
		baseline bool
	}
	byID := map[id]*series{}
	colours := map[id]int{} // by store and key count, baseline false
	var out []*series
	for _, c := range cells {
		store := c.Store
		if c.Baseline {
			store = strings.TrimSuffix(store, " raw")
		}
		k := id{store, c.Keys, c.Baseline}
		s := byID[k]
		if s == nil {
			label := c.Store
			if len(keyCounts) > 1 {
				label += " keys=" + strconv.Itoa(c.Keys)
			}
			ck := id{store, c.Keys, false}
			i, ok := colours[ck]
			if !ok {
				i = len(colours)
				colours[ck] = i
			}
			s = &series{label: label, baseline: c.Baseline, colour: plotutil.Color(i), shape: plotutil.Shape(i)}
			byID[k] = s
			out = append(out, s)
		}
		x := float64(c.Concurrency)
		if !plottable(x) {
			continue
		}
		if plottable(c.Throughput) {
			s.throughput = append(s.throughput, plotter.XY{X: x, Y: c.Throughput})
		}
		if p99 := float64(c.Latency.P99); plottable(p99) {
			s.p99 = append(s.p99, plotter.XY{X: x, Y: p99})
		}
	}
	out = slices.DeleteFunc(out, func(s *series) bool { return len(s.throughput)+len(s.p99) == 0 })
	for _, s := range out {
		for _, xys := range []plotter.XYs{s.throughput, s.p99} {
			slices.SortStableFunc(xys, func(a, b plotter.XY) int {
				switch {
				case a.X < b.X:
					return -1
				case a.X > b.X:
					return 1
				}
				return 0
			})
		}
	}
	return out
}

// plottable reports whether a log scale can show v.
func plottable(v float64) bool {
	return v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v)
}

func newPanel(title, yLabel string, label func(float64) string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "concurrency (goroutines)"
	p.Y.Label.Text = yLabel
	p.X.Scale = plot.LogScale{}
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = decadeTicks(label)
	p.Add(plotter.NewGrid())
	return p
}

// addSeries adds s's points xys to p as a line with points, dashed for
// a baseline, and returns them for the legend; none when xys is empty.
func addSeries(p *plot.Plot, s *series, xys plotter.XYs) ([]plot.Thumbnailer, error) {
	if len(xys) == 0 {
		return nil, nil
	}
	line, points, err := plotter.NewLinePoints(xys)
	if err != nil {
		return nil, err
	}
	line.Color = s.colour
	line.Width = vg.Points(1.5)
	if s.baseline {
		line.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	}
	points.Color = s.colour
	points.Shape = s.shape
	p.Add(line, points)
	return []plot.Thumbnailer{line, points}, nil
}

// setConcurrencyAxis sets a's range around the concurrencies measured,
// with a labelled tick at each.
func setConcurrencyAxis(a *plot.Axis, concurrencies []float64) {
	concurrencies = slices.Compact(slices.Sorted(slices.Values(concurrencies)))
	ticks := make(plot.ConstantTicks, len(concurrencies))
	for i, c := range concurrencies {
		ticks[i] = plot.Tick{Value: c, Label: strconv.FormatFloat(c, 'f', -1, 64)}
	}
	a.Tick.Marker = ticks
	a.Min = concurrencies[0] / math.Sqrt2
	a.Max = concurrencies[len(concurrencies)-1] * math.Sqrt2
}

// setDecadeAxis widens a's range to whole powers of ten, or to 1…10
// when it holds no point.
func setDecadeAxis(a *plot.Axis) {
	if !plottable(a.Min) || !plottable(a.Max) || a.Min > a.Max {
		a.Min, a.Max = 1, 10
		return
	}
	a.Min = math.Pow(10, math.Floor(math.Log10(a.Min)))
	a.Max = math.Pow(10, math.Ceil(math.Log10(a.Max)))
	if a.Min == a.Max {
		a.Max *= 10
	}
}

// decadeTicks returns a ticker for a log axis: a labelled tick at each
// power of ten, written by label, and unlabelled ones between them.
func decadeTicks(label func(float64) string) plot.Ticker {
	return plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		var ticks []plot.Tick
		for v := math.Pow(10, math.Floor(math.Log10(lo))); v <= hi*(1+1e-9); v *= 10 {
			ticks = append(ticks, plot.Tick{Value: v, Label: label(v)})
			for i := 2; i < 10 && v*float64(i) < hi; i++ {
				ticks = append(ticks, plot.Tick{Value: v * float64(i)})
			}
		}
		return ticks
	})
}

// A titleLine is one line of the plot's title.
type titleLine struct {
	text   string
	colour color.Color
}

func plotTitle(r *Report) []titleLine {
	lines := []titleLine{{text: "spigot bench on " + orNone(r.Machine, "an undescribed machine"), colour: color.Black}}
	if r.Server != "" {
		lines = append(lines, titleLine{text: "server: " + r.Server, colour: color.Black})
	}
	warn := color.RGBA{R: 200, A: 255}
	if r.Miniredis {
		lines = append(lines, titleLine{text: notRepresentative, colour: warn})
	}
	if r.Interrupted {
		lines = append(lines, titleLine{text: "interrupted: the cells measured so far", colour: warn})
	}
	return lines
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

// drawTitle writes lines centred at the top of c and returns the height
// they take.
func drawTitle(c draw.Canvas, lines []titleLine) vg.Length {
	sty := plot.New().Title.TextStyle
	sty.Font.Size = vg.Points(12)
	sty.XAlign = draw.XCenter
	sty.YAlign = draw.YTop
	lineHeight := sty.FontExtents().Height * 1.2
	y := c.Max.Y - vg.Points(6)
	for _, l := range lines {
		sty.Color = l.colour
		c.FillText(sty, vg.Point{X: c.Center().X, Y: y}, l.text)
		y -= lineHeight
	}
	return vg.Points(6) + lineHeight*vg.Length(len(lines)) + vg.Points(4)
}

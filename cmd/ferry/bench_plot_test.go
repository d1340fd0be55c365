package main

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/ferry-dev/ferry/cmd/ferry/internal/linkemu"
)

// plotPeers are the bars of each case, in this order.
var plotPeers = []string{"tar|ssh", "ssh -C", "zstd|ssh", "rsync -az", "ferry posix", "ferry agent"}

// plotLink writes a PNG of profile p's rows to path: per case, a bar per
// peer, its time over the best non-ferry peer's, so that cases of any size
// share one axis and a bar under the line at 1 beats every peer.
func plotLink(path string, p linkemu.Profile, rows []linkRow) error {
	type key struct{ set, dir string }
	var cases []key
	idx := map[key]int{}
	for _, r := range rows {
		k := key{r.Set, r.Direction}
		if _, ok := idx[k]; !ok {
			idx[k] = len(cases)
			cases = append(cases, k)
		}
	}
	pl := plot.New()
	pl.Title.Text = fmt.Sprintf("ferry vs peers over %s, RTT %v", p, p.RTT())
	pl.Y.Label.Text = "time / best peer's (lower is better)"
	// The legend sits in headroom above the tallest bar, at the right.
	pl.Legend.Top = true
	top := 1.0
	for _, r := range rows {
		top = max(top, r.Ratio)
	}
	w := vg.Points(9)
	for i, peer := range plotPeers {
		vals := make(plotter.Values, len(cases))
		for _, r := range rows {
			if r.Peer == peer {
				vals[idx[key{r.Set, r.Direction}]] = r.Ratio
			}
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		bars.Offset = w * vg.Length(2*i-len(plotPeers)+1) / 2
		pl.Add(bars)
		pl.Legend.Add(peer, bars)
	}
	one := plotter.NewFunction(func(float64) float64 { return 1 })
	one.Color = color.Gray{Y: 96}
	one.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	pl.Add(one)
	names := make([]string, len(cases))
	for i, c := range cases {
		names[i] = c.set + "\n" + c.dir
	}
	pl.NominalX(names...)
	pl.X.Tick.Label.Font.Size = vg.Points(8)
	pl.Y.Min, pl.Y.Max = 0, top*1.45
	return pl.Save(vg.Length(len(cases))*vg.Points(70)+vg.Points(120), 5*vg.Inch, path)
}

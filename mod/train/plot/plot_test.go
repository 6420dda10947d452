package plot

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"

	"github.com/modref/modref/mod/train"
)

// metrics returns two evaluations with the given losses.
func metrics(a, b float64) *train.Metrics {
	return &train.Metrics{Evals: []train.Eval{{Step: 1, FLOPs: 1e9, WallSeconds: 1, Loss: a}, {Step: 2, FLOPs: 2e9, WallSeconds: 2, Loss: b}}}
}

// routing returns a two-layer routing of "ab c\n": layer 0 routed (bytes 1
// and 3), layer 1 dense.
func routing() *train.Routing {
	return &train.Routing{Text: []byte("ab c\n"), Layers: []train.LayerRouting{
		{Routed: true, Processed: []bool{false, true, false, true, false}, RouterLogits: []float32{-1, 2, -0.5, 1.5, -2}},
		{Processed: []bool{true, true, true, true, true}},
	}}
}

// TestPictures draws each picture, checks that the PNGs decode, that the
// routing picture shows the processed colour and that Save writes only the
// file asked for.
func TestPictures(t *testing.T) {
	runs := []Run{{Name: "a1", Group: "dense", Metrics: metrics(3, 2)}, {Name: "a2", Group: "dense", Metrics: metrics(3.1, 2.1)}, {Name: "m", Metrics: metrics(2.9, 1.9)}}
	lf, err := Loss("loss", runs, FLOPs)
	if err != nil {
		t.Fatal(err)
	}
	var svg bytes.Buffer
	if err := Write(&svg, lf, "svg", 10*vg.Centimeter, 6*vg.Centimeter); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(svg.String(), ">dense<"); n != 1 {
		t.Errorf("the loss legend names group dense %d times, want once for its two runs", n)
	}
	rp, err := Routing("routing", routing())
	if err != nil {
		t.Fatal(err)
	}
	hp, err := RouterWeights("weights", routing(), 10)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]*gplot.Plot{"loss": lf, "weights": hp} {
		var buf bytes.Buffer
		if err := Write(&buf, p, "png", 10*vg.Centimeter, 6*vg.Centimeter); err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(&buf); err != nil {
			t.Errorf("%s: the PNG does not decode: %v", name, err)
		}
	}
	var buf bytes.Buffer
	if err := Write(&buf, rp, "png", 10*vg.Centimeter, 4*vg.Centimeter); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	// The heat map's processed colour (0x1f4e9a) must appear: 2 cells of
	// layer 0 and 5 of layer 1.
	found := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 == 0x1f && g>>8 == 0x4e && bl>>8 == 0x9a {
				found++
			}
		}
	}
	if found == 0 {
		t.Errorf("the routing picture has no pixel of the processed colour")
	}
	buf.Reset()
	if err := Write(&buf, hp, "svg", 10*vg.Centimeter, 6*vg.Centimeter); err != nil || !strings.Contains(buf.String(), "<svg") {
		t.Errorf("histogram as SVG: error %v, %d bytes without <svg", err, buf.Len())
	}

	dir := t.TempDir()
	if err := Save(filepath.Join(dir, "loss.png"), lf, 8*vg.Centimeter, 6*vg.Centimeter); err != nil {
		t.Fatal(err)
	}
	if err := Save(filepath.Join(dir, "loss.pdf"), lf, 8*vg.Centimeter, 6*vg.Centimeter); err == nil || !strings.Contains(err.Error(), `"pdf"`) {
		t.Errorf("saving as .pdf: error %v, want one naming the format", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "loss.png" {
		t.Errorf("directory holds %v, want only loss.png", entries)
	}
}

// TestPictureErrors checks that what cannot be drawn is an error.
func TestPictureErrors(t *testing.T) {
	if _, err := Loss("x", []Run{{Name: "empty", Metrics: &train.Metrics{}}}, FLOPs); err == nil || !strings.Contains(err.Error(), `"empty" has no evaluations`) {
		t.Errorf("a run without evaluations: error %v", err)
	}
	if _, err := Loss("x", nil, Axis(7)); err == nil {
		t.Error("an unknown axis: no error")
	}
	if _, err := Routing("x", &train.Routing{}); err == nil {
		t.Error("an empty routing: no error")
	}
	dense := routing()
	dense.Layers = dense.Layers[1:]
	if _, err := RouterWeights("x", dense, 10); err == nil || !strings.Contains(err.Error(), "no routed layer") {
		t.Errorf("router weights of a dense model: error %v", err)
	}
}

package bench

import (
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestReportScreenshot renders a demo-like report (closed- and open-loop
// runs with time series) in headless Chromium and checks the screenshot:
// the page lays out at the window's size and the figures drew their
// coloured lines and bars (a broken image or an empty page has none).
func TestReportScreenshot(t *testing.T) {
	browser := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		t.Skip("no chromium on PATH (Debian: apt-get install chromium) to screenshot the report")
	}
	var res Results
	for _, r := range sampleResults(t).Runs {
		if r.Zipf != 1.2 || r.Policy == "pegasus" {
			continue
		}
		for i := range 10 {
			r.Series = append(r.Series, SeriesPoint{T: float64(i + 1), ThroughputOps: 900 + 20*float64(i%3), LoadMaxOverMean: 1.2})
		}
		res.Runs = append(res.Runs, r)
		r.OfferedOps = 700
		res.Runs = append(res.Runs, r)
	}
	dir := t.TempDir()
	page, shot := filepath.Join(dir, "report.html"), filepath.Join(dir, "report.png")
	f, err := os.Create(page)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteHTML(f, res, "netdir demo: screenshot test"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	const width, height = 1280, 3000
	cmd := exec.Command(browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--window-size=1280,3000", "--screenshot="+shot, "file://"+page)
	done := make(chan error, 1)
	var out []byte
	go func() {
		var err error
		out, err = cmd.CombinedOutput()
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v\n%s", browser, err, out)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("%s took over 60 s", browser)
	}
	r, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v\n%s", err, out)
	}
	defer r.Close()
	img, err := png.Decode(r)
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	if b.Dx() != width || b.Dy() != height {
		t.Errorf("screenshot %dx%d, want %dx%d", b.Dx(), b.Dy(), width, height)
	}
	inked, coloured := 0, 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			rr, gg, bb, _ := img.At(x, y).RGBA()
			hi, lo := max(rr, gg, bb)>>8, min(rr, gg, bb)>>8
			if hi < 200 {
				inked++
			}
			if hi-lo > 100 {
				coloured++
			}
		}
	}
	total := b.Dx() * b.Dy()
	t.Logf("screenshot %dx%d: %.1f%% inked, %d coloured pixels", b.Dx(), b.Dy(), 100*float64(inked)/float64(total), coloured)
	if inked < total/200 {
		t.Errorf("the page is almost blank: %d dark pixels of %d", inked, total)
	}
	if coloured < 5000 {
		t.Errorf("only %d coloured pixels: the figures did not draw", coloured)
	}
}

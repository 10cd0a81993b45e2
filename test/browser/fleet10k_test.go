package browser_test

import (
	"fmt"
	"maps"
	"net/url"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/anvilproj/anvil/internal/benchfleet"
)

// fleetSize is the fleet: 10,000 machines, one in five with a
// workflow in varied states (internal/benchfleet's fleet at rest, the one
// bench/ui times).
const fleetSize = 10000

// TestFleet10k: with 10,000 machines in the store, the fleet page's first
// screen counts them by state right, and the hardware list's first and
// last pages list the right machines in the right states. Not timed:
// bench/ui measures how fast (docs/ui.md).
func TestFleet10k(t *testing.T) {
	base := serve(t, withObjects(benchfleet.RestObjects(fleetSize)...))
	ctx := browser(t)
	login(t, ctx, base, "fleet-viewer-token")

	want := map[string]int{"NONE": fleetSize - fleetSize/benchfleet.WorkflowEvery}
	for i := range fleetSize {
		if s, ok := benchfleet.StateOf(i); ok {
			want[string(s)]++
		}
	}
	// The UI's view fills from the store's watch after the server
	// starts: wait (bounded) until the page counts the whole fleet.
	total := fmt.Sprintf("%d machines by state", fleetSize)
	var heading string
	for deadline := time.Now().Add(30 * time.Second); ; {
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/")); err != nil {
			t.Fatalf("fleet page: %v", err)
		}
		var err error
		if heading, err = chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("counts").textContent`)); err != nil {
			t.Fatalf("fleet page: %v", err)
		}
		if heading == total || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if heading != total {
		t.Fatalf("fleet page heading %q; want %q", heading, total)
	}
	counts, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]int](
		`Object.fromEntries(Array.from(document.querySelectorAll("ul.counts a")).map(a => [a.children[1].textContent, Number(a.children[0].textContent)]))`))
	if err != nil {
		t.Fatal(err)
	}
	maps.DeleteFunc(counts, func(_ string, n int) bool { return n == 0 })
	if !maps.Equal(counts, want) {
		t.Errorf("fleet page counts %v; want %v", counts, want)
	}
	// The first screen: the counts are in the window without scrolling.
	if below, err := chromedp.Run(ctx, chromedp.Evaluate[bool](
		`document.querySelector("ul.counts").getBoundingClientRect().bottom > window.innerHeight`)); err != nil || below {
		t.Errorf("the counts end below the first screen (%v)", err)
	}
	screenshot(t, ctx, "fleet-10k.png")

	pages := fleetSize / 50 // internal/ui's PageSize
	for _, tc := range []struct {
		page  int
		first int // the first machine listed
	}{{1, 0}, {pages, fleetSize - 50}} {
		u := base + "/ui/hardware?" + url.Values{"page": {fmt.Sprint(tc.page)}}.Encode()
		if err := chromedp.Do(ctx, chromedp.Navigate(u)); err != nil {
			t.Fatalf("hardware page %d: %v", tc.page, err)
		}
		rows, err := chromedp.Run(ctx, chromedp.Evaluate[[][]string](
			`Array.from(document.querySelectorAll("main tbody tr")).map(tr => [tr.cells[0].textContent, tr.cells[3].textContent])`))
		if err != nil {
			t.Fatalf("hardware page %d: %v", tc.page, err)
		}
		status, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("main p[role=status]").textContent`))
		if err != nil {
			t.Fatal(err)
		}
		if ws := fmt.Sprintf("%d machines, page %d of %d.", fleetSize, tc.page, pages); status != ws {
			t.Errorf("hardware page %d says %q; want %q", tc.page, status, ws)
		}
		if len(rows) != 50 {
			t.Fatalf("hardware page %d lists %d machines; want 50", tc.page, len(rows))
		}
		for k, row := range rows {
			i := tc.first + k
			state := "NONE"
			if s, ok := benchfleet.StateOf(i); ok {
				state = string(s)
			}
			if want := []string{benchfleet.Namespace + "/" + benchfleet.Name(i), state}; row[0] != want[0] || row[1] != want[1] {
				t.Errorf("hardware page %d row %d = %q; want %q", tc.page, k, row, want)
			}
		}
		screenshot(t, ctx, fmt.Sprintf("hardware-10k-page%d.png", tc.page))
	}
}

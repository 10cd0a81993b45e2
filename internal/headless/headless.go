// Package headless starts Debian's chromium without a display for
// chromedp, with the flags the lab's notes give (no sandbox, no GPU, no
// background networking, component updates or sync: a browser that does
// nothing but what it is told). The browser tests of the web UI
// (test/browser) and the UI benchmark (bench/ui) start it the same way,
// so a figure and a test see the same browser.
//
// It owns the browser's command line, not what is done with it.
package headless

import (
	"context"

	"github.com/chromedp/chromedp"
)

// Width and Height are the window's size: a laptop's screen, the "first
// screen" a page is judged by.
const (
	Width  = 1200
	Height = 900
)

// Options are the allocator options for the chromium at path.
func Options(path string) []chromedp.ExecAllocatorOption {
	return append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.WindowSize(Width, Height))
}

// Start returns a chromedp context on a new headless chromium at path (it
// starts at the context's first Run), with the extra options after the
// common ones, and the function that ends both.
func Start(parent context.Context, path string, extra ...chromedp.ExecAllocatorOption) (context.Context, context.CancelFunc) {
	actx, cancelAlloc := chromedp.NewExecAllocator(parent, append(Options(path), extra...)...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	return ctx, func() { cancelCtx(); cancelAlloc() }
}

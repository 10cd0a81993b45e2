package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/anvilproj/anvil/internal/benchfleet"
	"github.com/anvilproj/anvil/internal/benchproc"
	"github.com/anvilproj/anvil/internal/freeport"
	"github.com/anvilproj/anvil/internal/headless"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/tinkpeer"
)

// The peer (-peer): Tinkerbell's own web UI, served by the tinkerbell
// binary (its UI service, on its HTTP port, the other services off) over
// the same machines as its custom resources on its kube-apiserver. Its UI
// logs in with a Kubernetes API server's URL and a bearer token (its
// login form); its pages read the API server on each request.

const peerName = "tinkerbell"

// peerPages are the peer's pages measured: its hardware list's first
// page, 50 machines as Anvil's shows (per_page=50: its default is 10).
// It has no page like Anvil's fleet page (machines counted by state): its
// home page is a browser of its resource definitions that counts nothing.
var peerPages = []page{
	{Name: "hardware", Path: "/hardware?per_page=50", Items: "tbody tr[data-href]"},
}

// peerPairs pair Anvil's pages with the peer's that show the same.
var peerPairs = [][2]string{{"hardware", "hardware"}}

func peerPath(name string) string {
	for _, p := range peerPages {
		if p.Name == name {
			return p.Path
		}
	}
	return ""
}

// peerArgs are the peer's options: its UI on port, everything else off.
func peerArgs(port int) func(kubeconfig string) []string {
	return func(kubeconfig string) []string {
		return []string{"--backend", "kube", "--backend-kube-config", kubeconfig,
			"--bind-address", "127.0.0.1", "--public-ipv4", "127.0.0.1", "--http-port", strconv.Itoa(port),
			"--enable-smee=false", "--enable-tootles=false", "--enable-tink-server=false", "--enable-tink-controller=false",
			"--enable-rufio-controller=false", "--enable-secondstar=false", "--enable-ui=true"}
	}
}

func runPeer(ctx context.Context, o options, chromium string, objs []model.Object, rep *report) error {
	port, err := freeport.Loopback()
	if err != nil {
		return err
	}
	peer, err := tinkpeer.Start(tinkpeer.Options{Binary: o.peer, Root: ".", Args: peerArgs(port), Keep: o.keep, Logf: progress})
	if err != nil {
		return err
	}
	defer peer.Stop()
	rep.peer = &peer.Program
	if err := createAll(ctx, peer, objs, rep); err != nil {
		return err
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	if err := waitPort(ctx, "127.0.0.1:"+strconv.Itoa(port)); err != nil {
		return fmt.Errorf("%w\n%s", err, peer.LogTail())
	}
	bctx, stop := headless.Start(ctx, chromium)
	defer stop()
	// Its login form: the API server's URL, a token, and "skip TLS
	// verification" (the API server's certificate is the test cluster's
	// own CA's, which the peer does not trust).
	if err := chromedp.Do(bctx,
		chromedp.Navigate(base+"/login"),
		chromedp.WaitVisible(chromedp.ID("tokenInput")),
		chromedp.SendKeys(chromedp.ID("apiServerInput"), peer.Cluster.URL),
		chromedp.SendKeys(chromedp.ID("tokenInput"), peer.Cluster.Token),
		chromedp.Click(chromedp.ID("insecureSkipVerify")),
		chromedp.Click(chromedp.ID("loginButton")),
	); err != nil {
		return fmt.Errorf("log in to Tinkerbell's UI: %w\n%s", err, peer.LogTail())
	}
	if err := waitLoggedIn(bctx); err != nil {
		return fmt.Errorf("%w\n%s", err, peer.LogTail())
	}
	progress("peer: logged in to Tinkerbell's UI")
	pids := peer.PIDs()
	cpu := func() (s float64) {
		for _, p := range pids {
			s += benchproc.ProcCPU(p)
		}
		return s
	}
	for _, p := range peerPages {
		cpu0 := cpu()
		s, err := measure(bctx, peerName, base, p, o.runs, o.shots, "tinkerbell-"+p.Name+".png")
		if err != nil {
			return fmt.Errorf("%w\n%s", err, peer.LogTail())
		}
		rep.add(s, (cpu()-cpu0)*1000/float64(len(s)))
	}
	// What its hardware list showed of the fleet (the page measured last).
	text, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		return err
	}
	rep.PeerNotes = append(rep.PeerNotes, fmt.Sprintf("its hardware list (%s) %s", peerPages[0].Path, totalLine(text)),
		"it has no page that counts machines by state (its home page browses its resource definitions)")
	return nil
}

// totalLine is the line of a page's text that gives a total ("of 10000"),
// or a note that none does.
func totalLine(text string) string {
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); strings.Contains(l, " of ") && strings.ContainsAny(l, "0123456789") && len(l) < 120 {
			return "it says " + strconv.Quote(l)
		}
	}
	return "no line of it gives a total"
}

// createAll creates objs in the peer's cluster (eight at a time) and
// sets each Workflow's status as Anvil's store holds it.
func createAll(ctx context.Context, peer *tinkpeer.Peer, objs []model.Object, rep *report) error {
	const api = "/apis/tinkerbell.org/v1alpha1/namespaces/"
	deadline := time.Now().Add(90 * time.Second) // its CRDs are installed at its start
	if err := peer.CreateRetrying(ctx, api+benchfleet.Namespace+"/templates", mustJSON(objs[0]), deadline); err != nil {
		return fmt.Errorf("create the template: %w", err)
	}
	t0 := time.Now()
	work := make(chan model.Object)
	var mu sync.Mutex
	var firstErr error
	statusRefused, statusErr := 0, error(nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for obj := range work {
				resource := "hardware"
				if obj.GetTypeMeta().Kind == model.KindWorkflow {
					resource = "workflows"
				}
				path := api + obj.GetObjectMeta().Namespace + "/" + resource
				err := peer.Create(ctx, path, mustJSON(obj))
				if err == nil && resource == "workflows" {
					wf := obj.(*model.Workflow)
					if err := peer.MergePatch(ctx, path+"/"+wf.Name+"/status", mustJSON(map[string]any{"status": wf.Status})); err != nil {
						mu.Lock()
						statusRefused++
						statusErr = err
						mu.Unlock()
					}
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for _, obj := range objs[1:] {
		work <- obj
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("create the peer's objects: %w", firstErr)
	}
	hw := peer.Count(ctx, api+benchfleet.Namespace+"/hardware")
	wfs := peer.Count(ctx, api+benchfleet.Namespace+"/workflows")
	progress("peer: created %d Hardware and %d Workflows in %.1f s", hw, wfs, time.Since(t0).Seconds())
	if hw != rep.Machines || wfs != rep.Workflows {
		return fmt.Errorf("the peer's cluster holds %d Hardware and %d Workflows; want %d and %d", hw, wfs, rep.Machines, rep.Workflows)
	}
	if statusRefused > 0 {
		rep.PeerNotes = append(rep.PeerNotes, fmt.Sprintf("%d Workflows' status (Anvil's, with its states) refused by its API server, e.g. %v", statusRefused, statusErr))
	}
	return nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // objects of the model always marshal
	}
	return b
}

func waitPort(ctx context.Context, addr string) error {
	for deadline := time.Now().Add(time.Minute); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the peer's UI does not listen on %s", addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitLoggedIn waits until the login page's script has taken the browser
// elsewhere, or says why not.
func waitLoggedIn(ctx context.Context) error {
	for deadline := time.Now().Add(time.Minute); ; {
		loc, err := chromedp.Run(ctx, chromedp.Location())
		if err != nil {
			return err
		}
		if !strings.Contains(loc, "/login") {
			return nil
		}
		if msg, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.getElementById("loginErrorMessage") || {}).textContent || ""`)); strings.TrimSpace(msg) != "" {
			return fmt.Errorf("the peer's login page refused: %s", msg)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still on %s a minute after logging in", loc)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

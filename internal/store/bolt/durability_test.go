package bolt

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/store/storetest"
)

// Environment of the writer child process.
const (
	envChildDB      = "ANVIL_BOLT_DURABILITY_DB"
	envChildPrefix  = "ANVIL_BOLT_DURABILITY_PREFIX"
	envChildWriters = "ANVIL_BOLT_DURABILITY_WRITERS"
)

// TestMain runs the writer child instead of the tests when
// TestDurabilitySIGKILL started this binary as one (envChildDB set), so
// that no test has to skip itself in the ordinary run.
func TestMain(m *testing.M) {
	if path := os.Getenv(envChildDB); path != "" {
		durabilityWriter(path)
	}
	os.Exit(m.Run())
}

// durabilityWriter is the child process of TestDurabilitySIGKILL, which
// runs the test binary with envChildDB set. It writes until killed,
// printing one line before each write ("try ...") and one after each
// acknowledged write ("ack ..."). A name is never reused after it is
// deleted, and each name is written by one goroutine, in order. It never
// returns.
func durabilityWriter(path string) {
	prefix := os.Getenv(envChildPrefix)
	writers, _ := strconv.Atoi(os.Getenv(envChildWriters))
	s, err := Open(path, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(3)
	}
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		line := fmt.Sprintf(format+"\n", args...)
		outMu.Lock()
		defer outMu.Unlock()
		// One write(2) per line, straight to the pipe: once it returns the
		// parent will read the line even if we are killed right after.
		if _, err := os.Stdout.WriteString(line); err != nil {
			os.Exit(4)
		}
	}
	fail := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		os.Exit(3)
	}
	for g := range writers {
		go func() {
			err := storetest.Churn(s, nil, storetest.ChurnConfig{
				Prefix: fmt.Sprintf("%s-g%d", prefix, g),
				Writer: uint8(g),
				Rand:   rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano()))),
				Before: func(w storetest.ChurnWrite) { say("try %s %s", w.Op, w.Key) },
				After: func(w storetest.ChurnWrite) error {
					if w.Op == storetest.OpDelete {
						say("ack %s %s", w.Op, w.Key)
					} else {
						say("ack %s %s rv=%s", w.Op, w.Key, w.RV)
					}
					return nil
				},
			})
			fail("churn", err)
		}()
	}
	// Never reached in normal use: the parent kills us. The limit keeps an
	// orphaned child from writing forever.
	time.Sleep(2 * time.Minute)
	fmt.Fprintln(os.Stderr, "writer child was not killed")
	os.Exit(5)
}

// nameState is what the parent knows about one object name.
type nameState struct {
	present bool   // after the last acknowledged write
	rv      uint64 // its resourceVersion, if present
	pending string // a write begun but not acknowledged: "create", "update", "delete"
}

// TestDurabilitySIGKILL kills a writer process at random moments and checks
// that every acknowledged write survived, that the file is consistent and
// that revisions are never reused.
func TestDurabilitySIGKILL(t *testing.T) {
	iterations := 50
	if testing.Short() {
		iterations = 10
	}
	path := filepath.Join(t.TempDir(), "anvil.db")
	state := map[string]*nameState{}
	var counter uint64 // revision counter after the last iteration
	totalAcks := 0
	for it := range iterations {
		// Vary the kill moment and the write pressure; every third
		// iteration is a heavy burst of many concurrent writers.
		delay := time.Duration(5+rand.IntN(296)) * time.Millisecond
		writers := []int{2, 4, 8, 64}[rand.IntN(4)]
		if it%3 == 2 {
			writers = 128
		}
		acks, lines := runWriterChild(t, path, fmt.Sprintf("i%d", it), writers, delay)
		minRV := uint64(0)
		for _, l := range lines {
			if err := applyLine(state, l, counter); err != nil {
				t.Fatalf("iteration %d: %v", it, err)
			}
			if rv := lineRV(l); rv != 0 && (minRV == 0 || rv < minRV) {
				minRV = rv
			}
		}
		newCounter, stored := checkFile(t, path)
		if newCounter < counter {
			t.Fatalf("iteration %d: revision counter went back from %d to %d", it, counter, newCounter)
		}
		if minRV != 0 && minRV <= counter {
			t.Fatalf("iteration %d: acknowledged revision %d reuses one at or before the previous run's counter %d", it, minRV, counter)
		}
		verifyState(t, it, state, stored, counter)
		counter = newCounter
		totalAcks += acks
		t.Logf("iteration %d: %d writers, killed %v after first ack, %d acknowledged writes, %d objects stored, revision %d",
			it, writers, delay, acks, len(stored), counter)

		// The store itself opens the crashed file and agrees with it.
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatalf("iteration %d: reopen: %v", it, err)
		}
		objs, rv, err := s.List(t.Context(), model.KindHardware, store.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) != len(stored) || rv != strconv.FormatUint(counter, 10) {
			t.Fatalf("iteration %d: store lists %d objects at %s; file holds %d at %d", it, len(objs), rv, len(stored), counter)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if totalAcks == 0 {
		t.Fatal("the writer child never acknowledged a write")
	}
}

// runWriterChild runs one writer process, kills it with SIGKILL delay after
// its first acknowledged write, and returns every line it printed.
func runWriterChild(t *testing.T, path, prefix string, writers int, delay time.Duration) (acks int, lines []string) {
	t.Helper()
	cmd := exec.Command(os.Args[0]) // TestMain runs durabilityWriter
	cmd.Env = append(os.Environ(), envChildDB+"="+path, envChildPrefix+"="+prefix, envChildWriters+"="+strconv.Itoa(writers))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 1024)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	killed := false
	kill := func() {
		if !killed {
			killed = true
			_ = cmd.Process.Kill() // SIGKILL
		}
	}
	var timer <-chan time.Time
	// A generous bound so that a child that hangs fails the test instead of
	// hanging it; no assertion depends on it.
	hang := time.After(2 * time.Minute)
	for ch != nil {
		select {
		case l, ok := <-ch:
			if !ok {
				ch = nil
				break
			}
			lines = append(lines, l)
			if strings.HasPrefix(l, "ack ") {
				acks++
				if timer == nil {
					timer = time.After(delay)
				}
			}
		case <-timer:
			kill()
			timer = nil
		case <-hang:
			kill()
			t.Fatalf("writer child made no progress; stderr:\n%s", stderr.String())
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("writer child exited by itself (%v) before being killed, after %d acks; stderr:\n%s", err, acks, stderr.String())
	}
	if acks == 0 {
		t.Fatalf("writer child acknowledged nothing; stderr:\n%s", stderr.String())
	}
	return acks, lines
}

func lineRV(l string) uint64 {
	_, v, ok := strings.Cut(l, " rv=")
	if !ok {
		return 0
	}
	n, _ := strconv.ParseUint(v, 10, 64)
	return n
}

func applyLine(state map[string]*nameState, l string, counter uint64) error {
	f := strings.Fields(l)
	if len(f) < 3 {
		return fmt.Errorf("bad line %q", l)
	}
	st := state[f[2]]
	if st == nil {
		if f[0] != "try" || f[1] != "create" {
			return fmt.Errorf("line %q for a name never created", l)
		}
		st = &nameState{}
		state[f[2]] = st
	}
	switch f[0] {
	case "try":
		st.pending = f[1]
	case "ack":
		if st.pending != f[1] {
			return fmt.Errorf("line %q acknowledges a write that was not begun", l)
		}
		st.pending = ""
		switch f[1] {
		case "create", "update":
			rv := lineRV(l)
			if rv == 0 {
				return fmt.Errorf("line %q has no rv", l)
			}
			if rv <= st.rv || rv <= counter {
				return fmt.Errorf("line %q: rv not after %d / counter %d", l, st.rv, counter)
			}
			st.present, st.rv = true, rv
		case "delete":
			st.present, st.rv = false, 0
		}
	default:
		return fmt.Errorf("bad line %q", l)
	}
	return nil
}

// checkFile runs CheckFile on the crashed file and returns the revision
// counter and every stored Hardware's resourceVersion by key.
func checkFile(t *testing.T, path string) (uint64, map[string]uint64) {
	t.Helper()
	c, err := CheckFile(path)
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]uint64{}
	for key, obj := range c.Objects[model.KindHardware] {
		// CheckFile has parsed every resourceVersion already.
		stored[key], _ = strconv.ParseUint(obj.GetObjectMeta().ResourceVersion, 10, 64)
	}
	return c.Revision, stored
}

// verifyState compares what is stored with what was acknowledged, then
// makes the stored state the exact expectation for later iterations (which
// never touch these names again).
func verifyState(t *testing.T, it int, state map[string]*nameState, stored map[string]uint64, prevCounter uint64) {
	t.Helper()
	for key := range stored {
		if state[key] == nil {
			t.Errorf("iteration %d: %s is stored but was never written", it, key)
		}
	}
	for key, st := range state {
		rv, present := stored[key]
		switch st.pending {
		case "":
			if st.present && (!present || rv != st.rv) {
				t.Errorf("iteration %d: %s acknowledged at rv %d; stored: %v at %d", it, key, st.rv, present, rv)
			}
			if !st.present && present {
				t.Errorf("iteration %d: %s deleted (acknowledged) but stored at %d", it, key, rv)
			}
		case "create":
			if present && rv <= prevCounter {
				t.Errorf("iteration %d: unacknowledged create of %s stored at old revision %d", it, key, rv)
			}
		case "update":
			if !present || rv < st.rv {
				t.Errorf("iteration %d: %s acknowledged at rv %d, update pending; stored: %v at %d", it, key, st.rv, present, rv)
			}
		case "delete":
			if present && rv != st.rv {
				t.Errorf("iteration %d: %s acknowledged at rv %d, delete pending; stored at %d", it, key, st.rv, rv)
			}
		}
		st.present, st.rv, st.pending = present, rv, ""
	}
	if t.Failed() {
		t.FailNow()
	}
}

package ui

import (
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/anvilproj/anvil/internal/logstore"
)

// Log lines on the pages: a workflow's agent output on its page, a
// machine's record (DHCP, TFTP, HTTP, syslog, its agent's lines) on the
// machine's. Each page shows the newest logTail lines when it loads and
// then follows them live: the page's one event stream (the workflow's,
// or the machine's /events) sends a "logs" event with the tail when it
// starts — replacing what the page was rendered with, so nothing written
// between the page's load and the stream's start is missed — then a
// "log" event with the new lines each time the log store's Subscription
// is poked by an Append. No file is polled.
const (
	// logTail is how many lines a page loads with, and a stream starts
	// with.
	logTail = 200
	// logKeep is how many lines a page keeps as new ones arrive: app.js
	// drops the oldest past it, so an open page's memory is bounded too.
	logKeep = 1000
)

// Events of the log stream.
const (
	eventLogReset = "logs" // the tail: replaces the page's lines
	eventLogLines = "log"  // new lines: appended
)

// logData is what the "logtable" and "loglines" templates (_logs.html)
// show.
type logData struct {
	Lines []logstore.Line
	// Skipped is how many lines came after Lines that the page was not
	// sent: it fell behind (a slow browser or network).
	Skipped int
	// Note, if set, is a row saying why the page does not follow the
	// log live.
	Note string
	// Error, if set, says why the log could not be read at load.
	Error string
	Keep  int
	// Events is the URL of the stream carrying the log's events, for a
	// page whose log has a stream of its own ("" when the page's other
	// stream carries them: one stream per page).
	Events string
}

// readLog is a page's log at load: the newest logTail lines of sel, or
// nil when the UI has no log store.
func (u *UI) readLog(sel logstore.Selection, events string) *logData {
	if u.cfg.Records == nil {
		return nil
	}
	d := &logData{Keep: logKeep, Events: events}
	lines, err := u.cfg.Records.ReadSelection(sel, logTail)
	if err != nil {
		d.Error = err.Error()
	}
	d.Lines = lines
	return d
}

// logSource is a line's second column: the task/action of an agent's
// output line (marked when it is stderr), else the service or stream
// that wrote it.
func logSource(l logstore.Line) string {
	switch {
	case l.ActionName != "" && l.Stream == "stderr":
		return l.TaskName + "/" + l.ActionName + " stderr"
	case l.ActionName != "":
		return l.TaskName + "/" + l.ActionName
	case l.Stream == "":
		return "agent"
	}
	return l.Stream
}

// logTime is a line's time as the pages show it (UTC, to the
// millisecond; the date is in the element's datetime).
func logTime(t time.Time) string { return t.UTC().Format("15:04:05.000") }

// logFeed is one stream's follow of a log selection. A nil *logFeed (no
// log store) sends nothing and is never ready.
type logFeed struct {
	u       *UI
	sub     *logstore.Subscription // nil when following was refused
	tail    []logstore.Line
	note    string // why sub is nil
	started bool   // the tail is sent
}

// followLogs starts following sel for one event stream; nil when the UI
// has no log store. Close it when the stream ends.
func (u *UI) followLogs(sel logstore.Selection) *logFeed {
	if u.cfg.Records == nil {
		return nil
	}
	f := &logFeed{u: u}
	var err error
	f.sub, f.tail, err = u.cfg.Records.Follow(sel, logTail)
	if err != nil {
		u.log.Warn("ui: a page's log is not followed live", "err", err)
		f.note = "This page's log is not live: " + err.Error() + ". Reload to try again."
		if errors.Is(err, logstore.ErrTooManyFollowers) {
			f.note = "This page's log is not live: the server follows too many pages' logs. Reload later."
		}
		if f.tail, err = u.cfg.Records.ReadSelection(sel, logTail); err != nil {
			f.note += " (" + err.Error() + ")"
		}
	}
	return f
}

// ready receives a value when new lines are waiting; nil (never ready)
// when nothing is followed.
func (f *logFeed) ready() <-chan struct{} {
	if f == nil || f.sub == nil {
		return nil
	}
	return f.sub.Ready()
}

func (f *logFeed) close() {
	if f != nil && f.sub != nil {
		f.sub.Close()
	}
}

// start writes the "logs" event: the tail Follow read. An empty tail
// sends nothing: the page, rendered before, had no line either (files
// only grow; a trim keeps the newest lines).
func (f *logFeed) start(w http.ResponseWriter) error {
	if f == nil {
		return nil
	}
	tail, note := f.tail, f.note
	f.tail, f.started = nil, true
	if len(tail) == 0 && note == "" {
		return nil
	}
	return f.write(w, eventLogReset, logData{Lines: tail, Note: note})
}

// next writes a "log" event with the lines that arrived, and how many
// were skipped after them.
func (f *logFeed) next(w http.ResponseWriter) error {
	lines, skipped := f.sub.Take()
	if len(lines) == 0 && skipped == 0 {
		return nil
	}
	return f.write(w, eventLogLines, logData{Lines: lines, Skipped: skipped})
}

func (f *logFeed) write(w http.ResponseWriter, event string, d logData) error {
	var buf bytes.Buffer
	// Every page holds the log templates; the workflow page's are used.
	if err := f.u.pages["workflow"].ExecuteTemplate(&buf, "loglines", d); err != nil {
		f.u.log.Error("ui: log lines failed to render", "err", err)
		return err
	}
	writeEvent(w, event, buf.String())
	return nil
}

// hardwareEvents streams a machine's record as Server-Sent Events: the
// "logs" event with its tail now, then "log" events with the lines the
// log store is given for it. In Kubernetes mode these are this
// replica's lines only.
func (u *UI) hardwareEvents(w http.ResponseWriter, r *request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	hw := u.view.hardwareByKey(ns + "/" + name)
	if hw == nil || !r.principal.Sees(ns) {
		http.Error(w, "no hardware "+ns+"/"+name, http.StatusNotFound)
		return
	}
	if u.cfg.Records == nil {
		http.Error(w, "this server keeps no machine records", http.StatusNotFound)
		return
	}
	feed := u.followLogs(logstore.MachineSelection(hw))
	defer feed.close()
	es := u.openEvents(w, r.Request)
	defer es.close()
	if feed.start(w) != nil || es.flush() != nil {
		return
	}
	for {
		select {
		case <-es.done():
			return
		case <-es.keepAlive():
			if es.ping() != nil {
				return
			}
		case <-feed.ready():
			if feed.next(w) != nil || es.flush() != nil {
				return
			}
		}
	}
}

// hardwareEventsURL is the path of a machine's event stream.
func hardwareEventsURL(ns, name string) string {
	return basePath + "hardware/" + url.PathEscape(ns) + "/" + url.PathEscape(name) + "/events"
}

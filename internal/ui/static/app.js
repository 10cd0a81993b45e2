// Anvil UI: live updates for the workflow and machine pages. The server
// renders every fragment (escaped by html/template); this script only
// swaps it in when a Server-Sent Event brings a new one. No other script
// runs on the UI. A page opens one event stream at most: the workflow's
// carries its progress and its log, a machine's its record.
"use strict";
(function () {
  var box = document.getElementById("progress");
  var log = document.getElementById("log-lines");
  var url = (box && box.dataset.events) || (log && log.dataset.events);
  if (!url || !window.EventSource) {
    return;
  }
  var events = new EventSource(url);
  if (box) {
    events.addEventListener("actions", function (e) {
      box.innerHTML = e.data;
      box.dataset.live = "1";
      // An ended workflow has nothing left to cancel.
      var cancel = document.getElementById("cancel");
      if (cancel && box.querySelector("[data-final]")) {
        cancel.remove();
      }
    });
    events.addEventListener("gone", function () {
      events.close();
      box.insertAdjacentHTML("afterbegin", '<p class="error" role="alert">This workflow was deleted.</p>');
    });
  }
  if (log) {
    var keep = parseInt(log.dataset.keep, 10) || 1000;
    // "logs": the newest lines when the stream starts (again, after a
    // reconnect): they replace the page's. "log": new lines, appended;
    // past keep rows the oldest go.
    events.addEventListener("logs", function (e) {
      log.innerHTML = e.data;
      log.dataset.live = "1";
    });
    events.addEventListener("log", function (e) {
      log.insertAdjacentHTML("beforeend", e.data);
      while (log.rows.length > keep) {
        log.deleteRow(0);
      }
    });
  }
})();

// The machine page's power state and its last power Job, pushed when the
// store's watch reports a change of the Machine or of its Jobs.
(function () {
  var box = document.getElementById("power-live");
  if (!box || !box.dataset.events || !window.EventSource) {
    return;
  }
  var events = new EventSource(box.dataset.events);
  events.addEventListener("power", function (e) {
    box.innerHTML = e.data;
    box.dataset.live = "1";
  });
})();

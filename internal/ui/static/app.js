// Anvil UI: live updates for the workflow page. The server renders every
// fragment (escaped by html/template); this script only swaps it in when
// a Server-Sent Event brings a new one. No other script runs on the UI.
"use strict";
(function () {
  var box = document.getElementById("progress");
  if (!box || !box.dataset.events || !window.EventSource) {
    return;
  }
  var events = new EventSource(box.dataset.events);
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

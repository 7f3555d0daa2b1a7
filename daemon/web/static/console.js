// The console's own script: live parts over Server-Sent Events, and the login
// token from the URL's fragment (never sent to the server, so never in a log).
"use strict";
(function () {
  function live() {
    document.querySelectorAll("[data-events]").forEach(function (el) {
      if (el.dataset.listening) return;
      el.dataset.listening = "1";
      var source = new EventSource(el.dataset.events);
      source.addEventListener("update", function (event) {
        var open = {};
        el.querySelectorAll("details[id]").forEach(function (d) { open[d.id] = d.open; });
        el.innerHTML = event.data;
        el.querySelectorAll("details[id]").forEach(function (d) {
          if (d.id in open) d.open = open[d.id];
        });
        if (window.htmx) window.htmx.process(el);
        el.dispatchEvent(new CustomEvent("console:updated", { bubbles: true }));
      });
      source.addEventListener("end", function () { source.close(); });
    });
  }
  function tokenFromFragment() {
    var field = document.getElementById("token");
    var match = /(?:^#|&)token=([^&]+)/.exec(window.location.hash);
    if (field && match) {
      field.value = decodeURIComponent(match[1]);
      history.replaceState(null, "", window.location.pathname + window.location.search);
    }
  }
  document.addEventListener("DOMContentLoaded", function () { live(); tokenFromFragment(); });
  document.addEventListener("htmx:afterSettle", live);
})();

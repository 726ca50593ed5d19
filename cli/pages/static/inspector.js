// Live pages without reloads. A page that can change names its event stream in
// <body data-live="/live?...">; on each "change" the page fetches itself again and swaps in the
// parts (elements with data-part and an id) whose markup changed, keeping open <details> open.
// The server renders and escapes everything; this file only moves its markup into place.
(function () {
  "use strict";
  var url = document.body.dataset.live;
  if (!url || !window.EventSource) return;
  var state = document.getElementById("live-state");
  var timer = null, busy = false, again = false;

  function mark(text, on) {
    if (!state) return;
    state.textContent = text;
    state.className = "live " + (on ? "on" : "off");
  }

  function swap(fresh) {
    var old = document.getElementById(fresh.id);
    if (!old) return;
    var open = {};
    old.querySelectorAll("details").forEach(function (d, i) { if (d.open) open[d.id || i] = true; });
    var markup = fresh.innerHTML;
    if (old.dataset.markup === markup) return;
    var node = document.importNode(fresh, true);
    node.querySelectorAll("details").forEach(function (d, i) { if (open[d.id || i]) d.open = true; });
    node.dataset.markup = markup;
    old.replaceWith(node);
  }

  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(window.location.href, { cache: "no-store", headers: { "Accept": "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html === null) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        doc.querySelectorAll("[data-part][id]").forEach(swap);
        document.title = doc.title;
        document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
      })
      .catch(function () { mark("reconnecting", false); })
      .then(function () {
        busy = false;
        if (again) { again = false; schedule(); }
      });
  }

  function schedule() {
    if (!timer) timer = setTimeout(function () { timer = null; refresh(); }, 250);
  }

  document.querySelectorAll("[data-part][id]").forEach(function (part) { part.dataset.markup = part.innerHTML; });
  var source = new EventSource(url);
  source.addEventListener("change", schedule);
  source.addEventListener("open", function () { mark("live", true); schedule(); });
  source.addEventListener("error", function () { mark("reconnecting", false); });
})();

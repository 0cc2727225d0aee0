// The live parts of a page ([data-live] with an id) are fetched again every few
// seconds and replaced when they changed. A part with data-live-key (the decision
// forms) is replaced only when its key changes, so typing is never lost; open
// <details> stay open. Polling stops when the page says so (data-poll="0").
(function () {
  "use strict";
  var every = parseInt(document.body.dataset.poll || "0", 10);
  if (!every) return;
  var busy = false, timer = null;

  function openDetails(root) {
    var ids = {};
    root.querySelectorAll("details[id]").forEach(function (d) { if (d.open) ids[d.id] = true; });
    return ids;
  }

  function swap(fresh) {
    var wasOpen = openDetails(document);
    fresh.querySelectorAll("[data-live][id]").forEach(function (next) {
      var cur = document.getElementById(next.id);
      if (!cur) return;
      if (cur.hasAttribute("data-live-key")) {
        if (cur.getAttribute("data-live-key") === next.getAttribute("data-live-key")) return;
      } else if (cur.innerHTML === next.innerHTML) {
        return;
      }
      next.querySelectorAll("details[id]").forEach(function (d) {
        if (wasOpen[d.id]) d.open = true;
      });
      cur.replaceWith(document.importNode(next, true));
    });
  }

  function tick() {
    if (busy || document.visibilityState === "hidden") return;
    busy = true;
    fetch(window.location.href, { headers: { "X-Live": "1" }, credentials: "same-origin" })
      .then(function (r) {
        if (r.status === 401 || r.redirected) { stop(); return null; }
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        if (!html) return;
        var fresh = new DOMParser().parseFromString(html, "text/html");
        swap(fresh);
        if (fresh.body && fresh.body.dataset.poll === "0") stop();
      })
      .catch(function () { /* the server restarts, the network blips: try again */ })
      .then(function () { busy = false; });
  }

  function stop() {
    if (timer) clearInterval(timer);
    timer = null;
    var note = document.getElementById("live-note");
    if (note) note.textContent = "";
  }

  timer = setInterval(tick, every);
})();

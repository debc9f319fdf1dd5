// cairn view: live updates. The page's <body data-poll="/api/..."> names a version URL; when the
// version changes (a trial started a phase, a step or finished), the page's <main> is replaced
// with the same URL's fresh server-rendered <main>. No other script runs; all text arrives
// escaped by the server's templates.
(function () {
  "use strict";
  var url = document.body.getAttribute("data-poll");
  if (!url || location.protocol === "file:") { return; }
  var version = null, busy = false, failures = 0;
  var badge = document.getElementById("live");
  function mark(ok) {
    if (!badge) { return; }
    badge.textContent = ok ? "live" : "offline";
    badge.className = ok ? "live" : "live stale";
  }
  function refresh() {
    return fetch(location.href, {headers: {"X-Cairn-Refresh": "1"}, cache: "no-store"})
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("content"), main = document.getElementById("content");
        if (fresh && main) {
          var open = Array.prototype.map.call(main.querySelectorAll("details[open]"),
                                              function (d) { return d.querySelector("summary") ? d.querySelector("summary").textContent : ""; });
          main.replaceChildren.apply(main, Array.prototype.slice.call(fresh.childNodes).map(function (n) { return document.adoptNode(n); }));
          Array.prototype.forEach.call(main.querySelectorAll("details"), function (d) {
            var s = d.querySelector("summary");
            if (s && open.indexOf(s.textContent) >= 0) { d.open = true; }
          });
          document.body.setAttribute("data-version", version);
        }
      });
  }
  function tick() {
    if (busy) { return; }
    busy = true;
    fetch(url, {cache: "no-store"})
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (d) {
        failures = 0; mark(true);
        if (version === null) { version = d.version; document.body.setAttribute("data-version", version); return null; }
        if (d.version !== version) { version = d.version; return refresh(); }
        return null;
      })
      .catch(function () { failures += 1; if (failures > 2) { mark(false); } })
      .then(function () { busy = false; });
  }
  tick();
  setInterval(tick, 1000);
}());

// Live pages: the team's feed arrives as server-sent events; each burst of events re-reads the
// page once (through htmx, which swaps #content in). A trailing timer rather than htmx's
// throttle, which drops the last event of a burst and would leave the page stale.
(function () {
  "use strict";
  var REFRESH_AFTER_MS = 250;
  var pending = null;
  function refresh() {
    pending = null;
    var content = document.getElementById("content");
    if (content && window.htmx) { window.htmx.trigger(content, "rota:changed"); }
  }
  // A form with data-confirm asks first (the one write, cancelling a job, has one). On the
  // document, so forms that a live refresh swapped in ask too.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.hasAttribute && form.hasAttribute("data-confirm")
        && !window.confirm(form.getAttribute("data-confirm"))) {
      event.preventDefault();
    }
  });
  // Times come as UTC clock times in <time datetime>; the viewer reads them in local time,
  // with the whole date and the UTC time in the title.
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function localTimes(root) {
    var times = (root || document).querySelectorAll("time[datetime]");
    for (var i = 0; i < times.length; i++) {
      var el = times[i], at = new Date(el.getAttribute("datetime"));
      if (isNaN(at.getTime())) { continue; }
      el.textContent = pad(at.getHours()) + ":" + pad(at.getMinutes()) + ":" + pad(at.getSeconds());
      el.title = at.getFullYear() + "-" + pad(at.getMonth() + 1) + "-" + pad(at.getDate()) + " "
        + el.textContent + " local · " + at.toISOString().replace("T", " ").slice(0, 19) + " UTC";
      el.setAttribute("data-local", "");
    }
  }
  document.addEventListener("htmx:afterSettle", function (event) { localTimes(event.target); });
  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    if (!document.body.hasAttribute("data-live") || !window.EventSource) { return; }
    var feed = new EventSource("/events");
    feed.addEventListener("rota", function () {
      if (pending === null) { pending = window.setTimeout(refresh, REFRESH_AFTER_MS); }
    });
  });
})();

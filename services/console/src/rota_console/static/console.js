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
  document.addEventListener("DOMContentLoaded", function () {
    if (!document.body.hasAttribute("data-live") || !window.EventSource) { return; }
    var feed = new EventSource("/events");
    feed.addEventListener("rota", function () {
      if (pending === null) { pending = window.setTimeout(refresh, REFRESH_AFTER_MS); }
    });
  });
})();

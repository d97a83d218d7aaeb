// Hookline console: the little script the pages need, and nothing inline (the CSP forbids it).
// - An element with data-refresh="<url>" re-fetches that URL (an HTML fragment) every
//   data-refresh-seconds (default 3) and replaces itself with the answer; the new element
//   keeps refreshing only if it still carries data-refresh (a finished job stops).
// - A form with data-confirm="<question>" asks before it submits.
// - A checkbox with data-select-all="<form id>" ticks or clears every checkbox of that form
//   (the dead-letter list's rows).
"use strict";

(function () {
  var DEFAULT_SECONDS = 3;

  function refreshLater(element) {
    var seconds = parseFloat(element.getAttribute("data-refresh-seconds")) || DEFAULT_SECONDS;
    window.setTimeout(function () { refresh(element); }, seconds * 1000);
  }

  function refresh(element) {
    var url = element.getAttribute("data-refresh");
    if (!url || !document.body.contains(element)) { return; }
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) {
        var holder = document.createElement("template");
        holder.innerHTML = html.trim();
        var replacement = holder.content.firstElementChild;
        if (!replacement) { return; }
        element.replaceWith(replacement);
        watch(replacement);
      })
      .catch(function () { refreshLater(element); });
  }

  function watch(root) {
    if (root.hasAttribute && root.hasAttribute("data-refresh")) { refreshLater(root); }
    root.querySelectorAll("[data-refresh]").forEach(refreshLater);
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) { event.preventDefault(); }
  });

  document.addEventListener("change", function (event) {
    var box = event.target;
    var formId = box.getAttribute && box.getAttribute("data-select-all");
    if (!formId) { return; }
    var selector = 'input[type="checkbox"][form="' + CSS.escape(formId) + '"]';
    document.querySelectorAll(selector).forEach(function (row) { row.checked = box.checked; });
  });

  document.addEventListener("DOMContentLoaded", function () { watch(document); });
})();

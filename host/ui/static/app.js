// AsyncGate dashboard: the only script. Elements with data-poll="URL" have
// their content replaced by that URL's HTML every data-every milliseconds,
// until the answer carries X-Poll-Stop. A data-select-all checkbox ticks
// every checkbox of its form named by the attribute.
"use strict";
document.querySelectorAll("[data-poll]").forEach(function (el) {
  var every = parseInt(el.dataset.every, 10) || 5000;
  function tick() {
    fetch(el.dataset.poll, { credentials: "same-origin" }).then(function (r) {
      if (r.redirected || !r.ok) { return; }
      var stop = r.headers.get("X-Poll-Stop");
      return r.text().then(function (html) {
        el.innerHTML = html;
        if (!stop) { setTimeout(tick, every); }
      });
    }).catch(function () { setTimeout(tick, every * 2); });
  }
  setTimeout(tick, every);
});
document.querySelectorAll("[data-select-all]").forEach(function (box) {
  box.addEventListener("change", function () {
    box.form.querySelectorAll('input[type=checkbox][name="' + box.dataset.selectAll + '"]').forEach(function (b) {
      b.checked = box.checked;
    });
  });
});

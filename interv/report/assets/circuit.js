/* interv circuit page: hover, focus or click an edge (or a curve point) to read its
   numbers in the detail box; click pins, Esc unpins. Part of interv, MIT licence.
   Without this script every number is still in each element's <title> (a tooltip). */
(function () {
  "use strict";
  function init(root) {
    if (root.dataset.ivcReady) return;
    root.dataset.ivcReady = "1";
    var detail = root.querySelector(".ivc-detail");
    var pinned = null;
    var lit = null;
    function show(el) {
      if (lit) lit.classList.remove("ivc-hl");
      lit = el;
      if (!el) { if (detail) detail.textContent = detail.dataset.empty || ""; return; }
      el.classList.add("ivc-hl");
      if (detail) detail.textContent = el.getAttribute("data-info") || "";
    }
    root.querySelectorAll("[data-info]").forEach(function (el) {
      el.addEventListener("mouseenter", function () { if (!pinned) show(el); });
      el.addEventListener("focus", function () { if (!pinned) show(el); });
      el.addEventListener("mouseleave", function () { if (!pinned) show(null); });
      el.addEventListener("click", function () {
        pinned = pinned === el ? null : el;
        show(pinned || el);
      });
    });
    root.addEventListener("keydown", function (event) {
      if (event.key === "Escape") { pinned = null; show(null); }
    });
  }
  document.querySelectorAll(".interv-circuit").forEach(init);
})();

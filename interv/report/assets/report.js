/* interv report page: sorting, filtering, views, folding and head details.
   Part of interv, MIT licence (see the LICENSE file of interv). Plain JavaScript, no
   dependencies. The page is complete without this script; it only rearranges and
   reveals what the HTML already holds. Every .interv-report on the page is set up once. */
(function () {
  "use strict";

  function each(list, fn) { Array.prototype.forEach.call(list, fn); }

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  /* A cell's sort value: data-v when present, else the number its text starts with. */
  function sortValue(cell) {
    if (!cell) return NaN;
    var v = cell.getAttribute("data-v");
    return parseFloat(v === null ? cell.textContent : v);
  }

  function makeSortable(table) {
    var headers = table.tHead.rows[0].cells;
    each(headers, function (th, col) {
      th.classList.add("iv-sort");
      th.tabIndex = 0;
      th.setAttribute("aria-sort", "none");
      function sort() {
        var ascending = th.getAttribute("aria-sort") !== "ascending";
        each(headers, function (other) { other.setAttribute("aria-sort", "none"); });
        th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
        var numeric = th.getAttribute("data-type") === "num";
        var sign = ascending ? 1 : -1;
        var body = table.tBodies[0];
        var keyed = Array.prototype.map.call(body.rows, function (row, i) {
          var cell = row.cells[col];
          return { row: row, i: i, k: numeric ? sortValue(cell) : (cell ? cell.textContent : "") };
        });
        keyed.sort(function (a, b) {
          var d;
          if (numeric) {
            var an = isNaN(a.k), bn = isNaN(b.k);
            d = an || bn ? an - bn : sign * (a.k - b.k); /* n/a always last */
          } else {
            d = sign * a.k.localeCompare(b.k);
          }
          return d || a.i - b.i;
        });
        var fragment = document.createDocumentFragment();
        keyed.forEach(function (item) { fragment.appendChild(item.row); });
        body.appendChild(fragment);
      }
      th.addEventListener("click", sort);
      th.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); sort(); }
      });
    });
  }

  function init(root) {
    if (root.getAttribute("data-ready")) return;
    root.classList.add("iv-js");
    var longTable = root.querySelector("table[data-view=long]");
    var wideTable = root.querySelector("table[data-view=wide]");
    each(root.querySelectorAll("table.iv-table"), makeSortable);

    /* ---- folding ---- */
    each(root.querySelectorAll(".iv-fold"), function (section) {
      var button = el("button", "", "");
      button.type = "button";
      function set(folded) {
        section.classList.toggle("iv-folded", folded);
        button.textContent = folded ? "show" : "hide";
        button.setAttribute("aria-expanded", String(!folded));
      }
      button.addEventListener("click", function () {
        set(!section.classList.contains("iv-folded"));
      });
      section.querySelector("h2").appendChild(button);
      set(section.getAttribute("data-folded") === "1");
    });

    /* ---- concentration metric of the heatmaps ---- */
    var metric = root.querySelector("select[data-control=metric]");
    if (metric) {
      metric.addEventListener("change", function () {
        each(root.querySelectorAll(".iv-heat[data-metric]"), function (fig) {
          fig.classList.toggle("iv-hide", fig.getAttribute("data-metric") !== metric.value);
        });
      });
    }

    /* ---- table: view, filters, columns ---- */
    function control(name) { return root.querySelector("[data-control=" + name + "]"); }
    function flagMatches(flags, kind, wanted) {
      if (!wanted) return true;
      var entries = flags ? flags.split("|") : [];
      if (wanted === "-") {
        return !entries.some(function (e) { return !kind || e.indexOf(kind + ":") === 0 || e.indexOf(":") < 0; });
      }
      return entries.some(function (e) {
        var cut = e.indexOf(":");
        if (cut < 0) return e === wanted;
        return e.slice(cut + 1) === wanted && (!kind || e.slice(0, cut) === kind);
      });
    }
    var count = root.querySelector(".iv-count");
    function apply() {
      var view = control("view") ? control("view").value : "long";
      var kind = control("kind") ? control("kind").value : "";
      var layer = control("layer") ? control("layer").value : "";
      var flag = control("flag") ? control("flag").value : "";
      var active = view === "wide" && wideTable ? wideTable : longTable;
      var shown = 0, total = 0;
      [longTable, wideTable].forEach(function (table) {
        if (!table) return;
        table.classList.toggle("iv-inactive", table !== active);
        var isWide = table === wideTable;
        each(table.tBodies[0].rows, function (row) {
          var ok = (!layer || row.getAttribute("data-l") === layer) &&
            (isWide || !kind || row.getAttribute("data-k") === kind) &&
            flagMatches(row.getAttribute("data-f"), isWide ? kind : "", flag);
          row.classList.toggle("iv-off", !ok);
          if (table === active) { total += 1; if (ok) shown += 1; }
        });
        if (isWide) {
          each(table.querySelectorAll("[data-kc]"), function (cell) {
            cell.classList.toggle("iv-coloff", !!kind && cell.getAttribute("data-kc") !== kind);
          });
        }
      });
      if (count) count.textContent = "showing " + shown + " of " + total + " rows";
    }
    ["view", "kind", "layer", "flag"].forEach(function (name) {
      var c = control(name);
      if (c) c.addEventListener("change", apply);
    });
    var all = control("all");
    if (all) all.addEventListener("change", function () { root.classList.toggle("iv-all", all.checked); });
    if (longTable) apply();

    /* ---- head details: hover, focus or click a heatmap cell or a scatter point ---- */
    var columns = {};
    var headRows = {};
    if (longTable) {
      each(longTable.tHead.rows[0].cells, function (th, i) { columns[th.getAttribute("data-c")] = i; });
      each(longTable.tBodies[0].rows, function (row) {
        var h = row.getAttribute("data-h");
        if (h) (headRows[h] = headRows[h] || []).push(row);
      });
    }
    var headers = longTable ? longTable.tHead.rows[0].cells : [];
    function cellText(row, key) {
      var i = columns[key];
      return i === undefined ? "" : row.cells[i].textContent;
    }
    function quantity(key) {
      var th = headers[columns[key]];
      return { name: th.getAttribute("data-name"), unit: th.getAttribute("data-unit") || "" };
    }
    var tip = el("div", "iv-tip");
    tip.hidden = true;
    tip.setAttribute("role", "dialog");
    root.appendChild(tip);
    var pinned = null, current = null;

    function fill(h) {
      tip.textContent = "";
      var match = /^L(\d+)H(\d+)$/.exec(h);
      var title = el("h3", "", h + (match ? " · layer " + match[1] + ", head " + match[2] : ""));
      tip.appendChild(el("span", "iv-pin", pinned ? "pinned · Esc to close" : "click to pin"));
      tip.appendChild(title);
      var rows = headRows[h] || [];
      if (!rows.length) { tip.appendChild(el("p", "", "No row of the table is about this head.")); return; }
      tip.appendChild(el("p", "iv-tip-note", "Concentration, mean ± sd over prompts: how the weights spread, not how much the head matters"));
      var table = el("table", "iv-tip-conc");
      Object.keys(columns).forEach(function (key) {
        if (key.indexOf("conc:") !== 0) return;
        var q = quantity(key);
        var tr = el("tr");
        tr.appendChild(el("td", "", q.name));
        tr.appendChild(el("td", "iv-num", cellText(rows[0], key)));
        tr.appendChild(el("td", "iv-unit", q.unit));
        table.appendChild(tr);
      });
      tip.appendChild(table);
      var effect = quantity("effect"), recovery = quantity("recovery");
      tip.appendChild(el("p", "iv-tip-note", "Effect of each intervention on this head: " + effect.name + ", " + effect.unit));
      rows.forEach(function (row) {
        var box = el("div", "iv-tip-kind");
        var line = el("div");
        line.appendChild(el("b", "", cellText(row, "kind") + " "));
        line.appendChild(document.createTextNode(cellText(row, "effect") + " " + effect.unit));
        box.appendChild(line);
        var rec = cellText(row, "recovery");
        if (rec && rec !== "n/a") box.appendChild(el("div", "", recovery.name + ": " + rec + " (" + recovery.unit + ")"));
        var flags = row.getAttribute("data-f");
        if (flags) box.appendChild(el("div", "", "flags: " + flags.split("|").join(", ")));
        box.appendChild(el("div", "iv-sem", cellText(row, "semantics")));
        tip.appendChild(box);
      });
    }
    function highlight(h, on) {
      if (!h) return;
      each(root.querySelectorAll('[data-h="' + h + '"]'), function (node) { node.classList.toggle("iv-hl", on); });
    }
    function place(target) {
      var r = target.getBoundingClientRect();
      var width = tip.offsetWidth, height = tip.offsetHeight;
      var left = r.right + 10;
      if (left + width > window.innerWidth - 8) left = Math.max(8, r.left - width - 10);
      var top = Math.min(Math.max(8, r.top - 10), Math.max(8, window.innerHeight - height - 8));
      tip.style.left = left + "px";
      tip.style.top = top + "px";
    }
    function show(target) {
      var h = target.getAttribute("data-h");
      if (current !== h) { highlight(current, false); current = h; highlight(h, true); }
      fill(h);
      tip.hidden = false;
      tip.setAttribute("data-head", h);
      place(target);
    }
    function hide() {
      tip.hidden = true;
      tip.removeAttribute("data-head");
      highlight(current, false);
      current = null;
    }
    function headTarget(node) {
      return node && node.closest ? node.closest(".iv-fig [data-h], .iv-headline li[data-h]") : null;
    }
    // A pinned tip follows its head while the page scrolls and closes once the head has
    // left the window, so it never floats over the tables; a hover tip closes on scroll.
    var scrolling = false;
    function onScroll(event) {
      if (tip.hidden || scrolling || (event.target !== document && tip.contains(event.target))) return;
      scrolling = true;
      window.requestAnimationFrame(function () {
        scrolling = false;
        if (tip.hidden) return;
        if (!pinned) { hide(); return; }
        var r = pinned.getBoundingClientRect();
        if (r.bottom < 0 || r.top > window.innerHeight || (!r.width && !r.height)) {
          pinned = null;
          hide();
        } else {
          place(pinned);
        }
      });
    }
    window.addEventListener("scroll", onScroll, { passive: true, capture: true });
    root.addEventListener("mouseover", function (event) {
      var target = headTarget(event.target);
      if (target && !pinned) show(target);
    });
    root.addEventListener("mouseout", function (event) {
      var target = headTarget(event.target);
      if (target && !pinned && headTarget(event.relatedTarget) !== target) hide();
    });
    root.addEventListener("focusin", function (event) {
      var target = headTarget(event.target);
      if (target && !pinned) show(target);
    });
    root.addEventListener("focusout", function (event) {
      if (headTarget(event.target) && !pinned) hide();
    });
    root.addEventListener("click", function (event) {
      var target = headTarget(event.target);
      if (target) {
        pinned = pinned === target ? null : target;
        if (pinned) show(target); else hide();
      } else if (pinned && !tip.contains(event.target)) {
        pinned = null;
        hide();
      }
    });
    root.addEventListener("keydown", function (event) {
      var target = headTarget(event.target);
      if (target && (event.key === "Enter" || event.key === " ")) {
        event.preventDefault();
        pinned = pinned === target ? null : target;
        show(target);
      }
    });
    document.addEventListener("keydown", function (event) {
      if (event.key === "Escape" && !tip.hidden) { pinned = null; hide(); }
    });
    root.setAttribute("data-ready", String(Math.round(performance.now())));
  }

  function initAll() { each(document.querySelectorAll(".interv-report"), init); }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", initAll);
  else initAll();
})();

/* interv attention viewer: draws the pattern, the row metrics and the prompt text on
   canvases from the data inlined beside this script, and exports PNG and SVG.
   Part of interv, MIT licence (see the LICENSE file of interv). Plain JavaScript, no
   dependencies, no network. Every .interv-attention on the page is set up once. */
(function () {
  "use strict";

  var ORANGE = [[255, 255, 255], [253, 208, 162], [253, 141, 60], [217, 72, 1], [127, 39, 4]];
  var STRIPS = [
    ["sink_mass", "sink mass", "fraction of the row"],
    ["normalized_entropy", "normalized entropy", "fraction of log n"],
    ["content_entropy", "content entropy", "nats"]
  ];
  var STRIP_W = 64, STRIP_GAP = 8;

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function bytesOf(b64) {
    var binary = atob(b64), out = new Uint8Array(binary.length);
    for (var i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
    return out;
  }

  function inflate(bytes) {
    if (typeof DecompressionStream === "undefined") {
      return Promise.reject(new Error(
        "this browser has no DecompressionStream (Chrome 80+, Firefox 113+, Safari 16.4+)"));
    }
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Response(stream).arrayBuffer().then(function (b) { return new Uint8Array(b); });
  }

  function ramp(stops) {
    var lut = new Uint8Array(256 * 3), last = stops.length - 1;
    for (var i = 0; i < 256; i++) {
      var x = (i / 255) * last, a = Math.min(Math.floor(x), last - 1), f = x - a;
      for (var c = 0; c < 3; c++) {
        lut[i * 3 + c] = Math.round(stops[a][c] + f * (stops[a + 1][c] - stops[a][c]));
      }
    }
    return lut;
  }

  function rgb(lut, i) {
    return "rgb(" + lut[i * 3] + "," + lut[i * 3 + 1] + "," + lut[i * 3 + 2] + ")";
  }

  /* A number for the reader: 4 significant digits; the exact value goes in data-v. */
  function fmt(x) {
    if (isNaN(x)) return "n/a";
    return String(Number(x.toPrecision(4)));
  }

  function shown(token) {
    return token.replace(/\n/g, "↵").replace(/\r/g, "␍").replace(/\t/g, "⇥");
  }

  function xml(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;")
      .replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f]/g, "\ufffd");
  }

  function Viewer(root, data) {
    this.root = root;
    this.data = data;
    this.n = data.n;
    this.blues = ramp(data.ramp);
    this.oranges = ramp(ORANGE);
    this.weight = new Float64Array(256);
    this.linear = new Uint8Array(256);
    for (var c = 1; c < 256; c++) {
      this.weight[c] = Math.pow(10, (c - 1) * 5 / 254 - 5);
      this.linear[c] = Math.round(255 * this.weight[c]);
    }
    this.cache = {};
    this.p = 0;
    this.k = 0;
    this.t = -1;
    this.j = -1;
    this.prompts = data.prompts.map(function (prompt) {
      var real = new Uint8Array(prompt.real.length);
      for (var i = 0; i < real.length; i++) real[i] = prompt.real.charCodeAt(i) === 49 ? 1 : 0;
      var sink = new Uint8Array(real.length);
      prompt.sink.forEach(function (s) { sink[s] = 1; });
      return {
        real: real, sink: sink, tokens: prompt.tokens, first: prompt.first, index: prompt.index,
        length: prompt.length
      };
    });
    this.q = function (name) { return root.querySelector("[data-control=" + name + "]"); };
    this.pattern = root.querySelector("canvas.iv-pattern");
    this.overlay = root.querySelector("canvas.iv-overlay");
    this.sinkbar = root.querySelector("canvas.iv-sinkbar");
    this.strips = root.querySelector("canvas.iv-strips");
    this.rowPanel = root.querySelector(".iv-row");
    this.text = root.querySelector(".iv-text");
    this.thumbs = root.querySelector(".iv-thumbs");
  }

  Viewer.prototype.index = function (t, j) {
    return this.data.causal ? (t * (t + 1)) / 2 + j : t * this.n + j;
  };

  /* The decoded cell of prompt p, head k: codes, metrics, top keys (a Promise). */
  Viewer.prototype.cell = function (p, k) {
    var key = p + ":" + k;
    if (!this.cache[key]) {
      var raw = this.data.cells[p][k], n = this.n, metrics = this.data.metrics;
      var head = this.data.heads[k];
      var codes = bytesOf(raw.codes);
      this.cache[key] = (raw.z ? inflate(codes) : Promise.resolve(codes)).then(function (c) {
        var all = new Float64Array(bytesOf(raw.metrics).buffer), byName = {};
        metrics.forEach(function (name, m) { byName[name] = all.subarray(m * n, (m + 1) * n); });
        return {
          head: head,
          n: raw.n,
          codes: c,
          metrics: byName,
          topIndex: new Int32Array(bytesOf(raw.topIndex).buffer),
          topWeight: new Float32Array(bytesOf(raw.topWeight).buffer)
        };
      });
    }
    return this.cache[key];
  };

  /* Whether the cell's head (its layer's rule: causal, sliding window, chunk) lets query t
     of prompt see key j. */
  Viewer.prototype.admits = function (cell, prompt, t, j) {
    var head = cell.head;
    if (!prompt.real[t] || !prompt.real[j] || (this.data.causal && j > t)) return false;
    if (head.window && t - j >= head.window) return false;
    if (head.chunk && Math.floor((j - prompt.first) / head.chunk) !==
        Math.floor((t - prompt.first) / head.chunk)) return false;
    return true;
  };

  Viewer.prototype.code = function (cell, t, j) {
    if (!this.admits(cell, this.prompts[this.p], t, j)) return -1;
    return cell.codes[this.index(t, j)];
  };

  /* The N x N picture of one cell in the chosen colour mode, on a canvas of N x N pixels. */
  Viewer.prototype.image = function (cell, p, mode) {
    var n = this.n, prompt = this.prompts[p], real = prompt.real, sink = prompt.sink;
    var canvas = document.createElement("canvas");
    canvas.width = n;
    canvas.height = n;
    var context = canvas.getContext("2d"), image = context.createImageData(n, n), px = image.data;
    var lut = this.blues, linear = this.linear, weight = this.weight, causal = this.data.causal;
    var masked = this.data.masked, padding = this.data.padding, codes = cell.codes;
    var sinkMass = cell.metrics.sink_mass;
    for (var t = 0; t < n; t++) {
      var rowReal = real[t], base = causal ? (t * (t + 1)) / 2 : t * n;
      var scale = mode === "content" ? 1 / Math.max(1e-300, 1 - sinkMass[t]) : 1;
      for (var j = 0; j < n; j++) {
        var o = (t * n + j) * 4, colour = null, i = 0;
        if (!rowReal || !real[j]) colour = padding;
        else if (!this.admits(cell, prompt, t, j)) colour = masked;
        else {
          var c = codes[base + j];
          if (mode === "log") i = c;
          else if (mode === "content") {
            if (sink[j]) colour = [250, 222, 190];
            else i = Math.min(255, Math.round(255 * weight[c] * scale));
          } else i = linear[c];
        }
        if (colour) {
          px[o] = colour[0]; px[o + 1] = colour[1]; px[o + 2] = colour[2];
        } else {
          px[o] = lut[i * 3]; px[o + 1] = lut[i * 3 + 1]; px[o + 2] = lut[i * 3 + 2];
        }
        px[o + 3] = 255;
      }
    }
    context.putImageData(image, 0, 0);
    return canvas;
  };

  Viewer.prototype.size = function () {
    var zoom = this.q("zoom").value, n = this.n;
    if (zoom !== "fit") return n * Number(zoom);
    /* the numbers panel sits beside the pattern when at least 480 px are left for it,
       else below (the layout wraps) */
    var main = this.root.querySelector(".iv-main");
    var free = (main.clientWidth || 900) - 3 * (STRIP_W + STRIP_GAP) - 24;
    var width = free - 380 >= 480 ? free - 380 : free;
    return Math.max(120, Math.min(width, 720, n * 32));
  };

  Viewer.prototype.hatch = function (context, scale) {
    var tile = document.createElement("canvas");
    tile.width = tile.height = Math.max(4, Math.round(6 * scale));
    var t = tile.getContext("2d");
    t.strokeStyle = "rgba(160,100,100,0.7)";
    t.lineWidth = Math.max(1, scale);
    t.beginPath();
    t.moveTo(0, tile.height);
    t.lineTo(tile.width, 0);
    t.stroke();
    return context.createPattern(tile, "repeat");
  };

  Viewer.prototype.bands = function () {
    var real = this.prompts[this.p].real, bands = [], start = -1;
    for (var i = 0; i <= this.n; i++) {
      var pad = i < this.n && !real[i];
      if (pad && start < 0) start = i;
      if (!pad && start >= 0) { bands.push([start, i]); start = -1; }
    }
    return bands;
  };

  /* Draw the chosen prompt and head: pattern, sink bar, strips, text. */
  Viewer.prototype.draw = function () {
    var self = this, p = this.p, k = this.k, mode = this.q("colour").value;
    return this.cell(p, k).then(function (cell) {
      if (p !== self.p || k !== self.k) return;
      self.current = cell;
      self.picture = self.image(cell, p, mode);
      var size = self.size(), dpr = window.devicePixelRatio || 1, px = Math.round(size * dpr);
      self.px = size;
      [self.pattern, self.overlay].forEach(function (canvas) {
        canvas.width = px;
        canvas.height = px;
        canvas.style.width = canvas.style.height = size + "px";
      });
      var context = self.pattern.getContext("2d");
      context.imageSmoothingEnabled = px < self.n;
      context.drawImage(self.picture, 0, 0, px, px);
      self.sinkbar.width = px;
      self.sinkbar.height = Math.round(8 * dpr);
      self.sinkbar.style.width = size + "px";
      self.sinkbar.style.height = "8px";
      var bar = self.sinkbar.getContext("2d"), sink = self.prompts[p].sink, cellPx = px / self.n;
      bar.clearRect(0, 0, px, self.sinkbar.height);
      bar.fillStyle = "rgb(" + self.data.sinkColour.join(",") + ")";
      for (var s = 0; s < self.n; s++) {
        if (sink[s]) bar.fillRect(s * cellPx, 0, Math.max(cellPx, 2 * dpr), self.sinkbar.height);
      }
      self.drawStrips(cell, size, dpr);
      self.drawOverlay();
      self.showHead();
      if (self.textPrompt !== p) self.buildText();
      self.colourText();
      self.showRow();
    });
  };

  Viewer.prototype.drawStrips = function (cell, size, dpr) {
    var n = this.n, canvas = this.strips, width = 3 * STRIP_W + 2 * STRIP_GAP;
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(size * dpr);
    canvas.style.width = width + "px";
    canvas.style.height = size + "px";
    var context = canvas.getContext("2d"), row = (size * dpr) / n, real = this.prompts[this.p].real;
    context.clearRect(0, 0, canvas.width, canvas.height);
    var limits = this.limits();
    STRIPS.forEach(function (strip, s) {
      var x0 = s * (STRIP_W + STRIP_GAP) * dpr, w = STRIP_W * dpr, values = cell.metrics[strip[0]];
      context.fillStyle = "#f4f4f4";
      context.fillRect(x0, 0, w, canvas.height);
      context.fillStyle = "#3370b3";
      for (var t = 0; t < n; t++) {
        var v = values[t];
        if (!real[t]) {
          context.fillStyle = "rgb(244,224,224)";
          context.fillRect(x0, t * row, w, Math.max(row, 1));
          context.fillStyle = "#3370b3";
        } else if (!isNaN(v) && v > 0) {
          context.fillRect(x0, t * row, w * Math.min(1, v / limits[s]), Math.max(row, 1));
        }
      }
    });
    var heads = this.root.querySelectorAll(".iv-striphead span");
    STRIPS.forEach(function (strip, s) {
      if (heads[s]) heads[s].textContent = strip[1] + " (" + strip[2] + ", 0…" + fmt(limits[s]) + ")";
    });
  };

  /* Bar scales: 1 for the fractions, log(max n - |S|) nats for the content entropy. */
  Viewer.prototype.limits = function () {
    var prompt = this.prompts[this.p], cell = this.current, most = 2;
    if (!cell) return [1, 1, Math.log(most)];
    for (var t = 0; t < cell.n.length; t++) {
      var content = cell.n[t];
      for (var j = 0; j < this.n; j++) if (prompt.sink[j] && this.admits(cell, prompt, t, j)) content -= 1;
      if (content > most) most = content;
    }
    return [1, 1, Math.log(most)];
  };

  Viewer.prototype.drawOverlay = function () {
    var canvas = this.overlay, context = canvas.getContext("2d"), px = canvas.width;
    var cell = px / this.n, dpr = window.devicePixelRatio || 1;
    context.clearRect(0, 0, px, px);
    context.fillStyle = this.hatch(context, dpr);
    this.bands().forEach(function (band) {
      context.fillRect(band[0] * cell, 0, (band[1] - band[0]) * cell, px);
      context.fillRect(0, band[0] * cell, px, (band[1] - band[0]) * cell);
    });
    context.lineWidth = Math.max(1, dpr);
    if (this.t >= 0) {
      context.strokeStyle = "rgba(220,60,20,0.9)";
      context.strokeRect(0.5, this.t * cell, px - 1, Math.max(cell, 1));
    }
    if (this.j >= 0) {
      context.strokeStyle = "rgba(20,140,60,0.9)";
      context.strokeRect(this.j * cell, 0.5, Math.max(cell, 1), px - 1);
    }
  };

  Viewer.prototype.showHead = function () {
    var k = String(this.k);
    Array.prototype.forEach.call(this.root.querySelectorAll("[data-head]"), function (node) {
      if (node.tagName !== "CANVAS") node.hidden = node.getAttribute("data-head") !== k;
    });
    Array.prototype.forEach.call(this.thumbs.children, function (thumb) {
      thumb.classList.toggle("iv-on", thumb.getAttribute("data-k") === k);
    });
  };

  Viewer.prototype.buildText = function () {
    var self = this, prompt = this.prompts[this.p], fragment = document.createDocumentFragment();
    this.spans = prompt.tokens.map(function (token, t) {
      var span = el("span", "iv-tok", shown(token));
      span.setAttribute("data-t", t);
      if (!prompt.real[t]) span.classList.add("iv-padtok");
      if (prompt.sink[t]) span.classList.add("iv-sinktok");
      fragment.appendChild(span);
      return span;
    });
    this.text.textContent = "";
    this.text.appendChild(fragment);
    this.textPrompt = this.p;
    this.coloured = null;
    this.text.onmouseover = function (event) {
      var t = event.target.getAttribute && event.target.getAttribute("data-t");
      if (t !== null && t !== undefined) self.focus(Number(t), self.j);
    };
  };

  /* Tokens coloured by the focused row: where it attends (blue) and what attends to it
     (orange), on the pattern's colour scale. */
  Viewer.prototype.colourText = function () {
    var t = this.t, cell = this.current, mode = this.q("text").value, logScale = this.q("colour").value === "log";
    var self = this, spans = this.spans, prompt = this.prompts[this.p];
    if (this.coloured) {
      this.coloured.forEach(function (i) {
        spans[i].style.background = "";
        spans[i].style.color = "";
      });
    }
    this.coloured = [];
    spans.forEach(function (span, i) { span.classList.toggle("iv-focus", i === t); });
    if (t < 0 || !cell || !prompt.real[t]) return;
    function paint(i, code, lut) {
      if (code <= 0) return;
      var index = logScale ? code : self.linear[code];
      if (index === 0) return;
      spans[i].style.background = rgb(lut, index);
      if (index > 170) spans[i].style.color = "#fff";
      self.coloured.push(i);
    }
    for (var i = 0; i < this.n; i++) {
      if (mode !== "column" && (!this.data.causal || i <= t)) paint(i, this.code(cell, t, i), this.blues);
      if (mode !== "row" && (this.data.causal ? i > t : mode === "column")) {
        paint(i, this.code(cell, i, t), this.oranges);
      }
    }
  };

  Viewer.prototype.focus = function (t, j) {
    t = Math.max(-1, Math.min(this.n - 1, t));
    j = Math.max(-1, Math.min(this.n - 1, j));
    var rowChanged = t !== this.t;
    this.t = t;
    this.j = j;
    this.drawOverlay();
    if (rowChanged) this.colourText();
    this.showRow();
  };

  function line(list, name, value, unit, exact) {
    var dt = el("dt", "", name), dd = el("dd");
    var number = el("span", "iv-num", value);
    if (exact !== undefined) number.setAttribute("data-v", String(exact));
    dd.appendChild(number);
    if (unit) dd.appendChild(el("span", "iv-unit", " " + unit));
    list.appendChild(dt);
    list.appendChild(dd);
  }

  var UNDEFINED = {
    sink_mass: "no available key",
    entropy: "no available key",
    normalized_entropy: "undefined: n ≤ 1",
    content_entropy: "undefined: no content mass",
    content_normalized_entropy: "undefined: n − |S| ≤ 1 or no content mass"
  };

  /* The focused row's exact numbers (and the hovered key's display weight). */
  Viewer.prototype.showRow = function () {
    var panel = this.rowPanel, t = this.t, cell = this.current, data = this.data;
    var prompt = this.prompts[this.p];
    if (t < 0 || !cell) return;
    panel.textContent = "";
    var title = el("p", "iv-rowtitle");
    title.appendChild(el("b", "", "query row " + t));
    title.appendChild(document.createTextNode(" · token “" + shown(prompt.tokens[t]) + "”"));
    panel.appendChild(title);
    if (!prompt.real[t]) {
      panel.appendChild(el("p", "iv-hint", "padding query: not a real token, no numbers"));
      return;
    }
    var list = el("dl", "iv-metrics");
    line(list, "available keys n", String(cell.n[t]), "(" + cell.head.rule + ")");
    data.metrics.forEach(function (name) {
      var v = cell.metrics[name][t];
      line(list, name.replace(/_/g, " "), isNaN(v) ? UNDEFINED[name] : fmt(v), isNaN(v) ? "" : data.units[name], v);
    });
    panel.appendChild(list);
    var top = el("p", "iv-top");
    top.appendChild(el("span", "iv-unit", "top keys (exact weights): "));
    for (var r = 0; r < data.topK; r++) {
      var key = cell.topIndex[t * data.topK + r], w = cell.topWeight[t * data.topK + r];
      if (key < 0) continue;
      var item = el("span", "iv-topkey", key + " “" + shown(prompt.tokens[key]) + "” " + fmt(w));
      item.setAttribute("data-v", String(w));
      top.appendChild(item);
      top.appendChild(document.createTextNode(" "));
    }
    panel.appendChild(top);
    if (this.j >= 0) {
      var j = this.j, code = this.code(cell, t, j), text;
      if (!prompt.real[j]) text = "padding: not a key";
      else if (code < 0) text = j > t ? "causally masked (after the query)" : "masked (" + cell.head.rule + ")";
      else if (code === 0) text = "weight < 1e-5 (display code 0)";
      else text = "weight ≈ " + fmt(this.weight[code]) + " (8-bit display code " + code + ")";
      panel.appendChild(el("p", "iv-key", "key " + j + " “" + shown(prompt.tokens[j]) + "”: " + text));
    }
  };

  Viewer.prototype.position = function (event, canvas) {
    var box = canvas.getBoundingClientRect();
    return [
      Math.floor(((event.clientY - box.top) / box.height) * this.n),
      Math.floor(((event.clientX - box.left) / box.width) * this.n)
    ];
  };

  Viewer.prototype.drawThumbs = function () {
    var self = this, p = this.p, mode = this.q("colour").value;
    this.thumbs.textContent = "";
    this.data.heads.forEach(function (head, k) {
      var box = el("button", "iv-thumb");
      box.type = "button";
      box.setAttribute("data-k", String(k));
      box.title = head.label + " (kv head " + head.kv + ")";
      var canvas = el("canvas");
      canvas.width = canvas.height = 64;
      box.appendChild(canvas);
      box.appendChild(el("span", "", head.label));
      box.addEventListener("click", function () { self.q("head").value = String(k); self.select(); });
      self.thumbs.appendChild(box);
    });
    this.showHead();
    var k = 0;
    function next() {
      if (k >= self.data.heads.length || self.p !== p) return;
      var index = k++;
      self.cell(p, index).then(function (cell) {
        if (self.p !== p) return;
        var canvas = self.thumbs.children[index].firstChild, context = canvas.getContext("2d");
        context.imageSmoothingEnabled = true;
        context.drawImage(self.image(cell, p, mode), 0, 0, 64, 64);
        setTimeout(next, 0);
      });
    }
    setTimeout(next, 0);
  };

  Viewer.prototype.select = function () {
    var p = Number(this.q("prompt").value), k = Number(this.q("head").value);
    var promptChanged = p !== this.p;
    this.p = p;
    this.k = k;
    if (promptChanged) {
      this.t = -1;
      this.j = -1;
    }
    if (this.t < 0) this.t = this.prompts[p].length - 1 + firstReal(this.prompts[p].real);
    var done = this.draw();
    if (promptChanged) this.drawThumbs();
    return done;
  };

  function firstReal(real) {
    for (var i = 0; i < real.length; i++) if (real[i]) return i;
    return 0;
  }

  /* ---- export ---- */
  Viewer.prototype.composed = function () {
    var n = this.n, cellPx = Math.max(1, Math.floor(768 / n)), size = n * cellPx;
    var stripsW = 3 * (STRIP_W + STRIP_GAP), head = this.data.heads[this.k];
    var width = Math.max(size + stripsW + 60, 720), height = size + 150;
    var canvas = document.createElement("canvas");
    canvas.width = width;
    canvas.height = height;
    var c = canvas.getContext("2d");
    c.fillStyle = "#fff";
    c.fillRect(0, 0, width, height);
    c.fillStyle = "#111";
    c.font = "bold 15px sans-serif";
    c.fillText(this.headline(), 20, 24);
    c.font = "11px sans-serif";
    c.fillText(this.kvText(), 20, 42);
    c.fillText("colour: " + this.q("colour").selectedOptions[0].textContent + "; 8-bit log-coded weights (quantized picture)", 20, 58);
    var scope = this.root.querySelector(".iv-scope").textContent;
    c.font = "10px sans-serif";
    wrap(scope, 150).slice(0, 3).forEach(function (text, i) { c.fillText(text, 20, 74 + 12 * i); });
    var top = 120, left = 20;
    var sinkColour = "rgb(" + this.data.sinkColour.join(",") + ")", sink = this.prompts[this.p].sink;
    c.fillStyle = sinkColour;
    for (var s = 0; s < n; s++) if (sink[s]) c.fillRect(left + s * cellPx, top - 8, Math.max(cellPx, 2), 6);
    c.imageSmoothingEnabled = false;
    c.drawImage(this.picture, left, top, size, size);
    c.fillStyle = this.hatch(c, 1);
    this.bands().forEach(function (band) {
      c.fillRect(left + band[0] * cellPx, top, (band[1] - band[0]) * cellPx, size);
      c.fillRect(left, top + band[0] * cellPx, size, (band[1] - band[0]) * cellPx);
    });
    var limits = this.limits(), cell = this.current, real = this.prompts[this.p].real;
    STRIPS.forEach(function (strip, i) {
      var x = left + size + 20 + i * (STRIP_W + STRIP_GAP), values = cell.metrics[strip[0]];
      c.fillStyle = "#111";
      c.font = "9px sans-serif";
      c.fillText(strip[1], x, top - 22);
      c.fillText("(" + strip[2] + ", 0…" + fmt(limits[i]) + ")", x, top - 11);
      c.fillStyle = "#f4f4f4";
      c.fillRect(x, top, STRIP_W, size);
      c.fillStyle = "#3370b3";
      for (var t = 0; t < n; t++) {
        var v = values[t];
        if (real[t] && !isNaN(v) && v > 0) {
          c.fillRect(x, top + t * cellPx, STRIP_W * Math.min(1, v / limits[i]), Math.max(cellPx, 1));
        }
      }
    });
    return canvas;
  };

  Viewer.prototype.headline = function () {
    var head = this.data.heads[this.k], prompt = this.prompts[this.p];
    return "interv attention · " + this.data.model + " · " + head.label + " · prompt " + prompt.index;
  };

  Viewer.prototype.kvText = function () {
    var info = this.root.querySelector(".iv-headinfo[data-head='" + this.k + "']");
    return info ? info.textContent : "";
  };

  function wrap(text, width) {
    var words = text.split(" "), lines = [], current = "";
    words.forEach(function (word) {
      if ((current + " " + word).length > width && current) { lines.push(current); current = word; }
      else current = current ? current + " " + word : word;
    });
    if (current) lines.push(current);
    return lines;
  }

  Viewer.prototype.svg = function () {
    var n = this.n, size = Math.min(768, Math.max(n, 480)), cell = size / n, left = 20, top = 120;
    var width = Math.max(left + size + 3 * (STRIP_W + STRIP_GAP) + 40, 720), height = top + size + 30;
    var out = [
      "<svg xmlns='http://www.w3.org/2000/svg' width='" + width + "' height='" + height +
        "' viewBox='0 0 " + width + " " + height + "' font-family='sans-serif'>",
      "<title>" + xml(this.headline()) + "</title>",
      "<defs><pattern id='iv-hatch' width='6' height='6' patternUnits='userSpaceOnUse'>" +
        "<path d='M0,6 L6,0' stroke='#b08080'/></pattern></defs>",
      "<rect width='100%' height='100%' fill='#fff'/>",
      "<text x='20' y='24' font-size='15' font-weight='bold'>" + xml(this.headline()) + "</text>",
      "<text x='20' y='42' font-size='11'>" + xml(this.kvText()) + "</text>",
      "<text x='20' y='58' font-size='11'>" + xml("colour: " + this.q("colour").selectedOptions[0].textContent +
        "; the pattern is an embedded raster of 8-bit log-coded weights (quantized)") + "</text>"
    ];
    wrap(this.root.querySelector(".iv-scope").textContent, 150).slice(0, 3).forEach(function (text, i) {
      out.push("<text x='20' y='" + (74 + 12 * i) + "' font-size='10'>" + xml(text) + "</text>");
    });
    var sink = this.prompts[this.p].sink;
    for (var s = 0; s < n; s++) {
      if (sink[s]) {
        out.push("<rect x='" + (left + s * cell) + "' y='" + (top - 8) + "' width='" + Math.max(cell, 2) +
          "' height='6' fill='rgb(" + this.data.sinkColour.join(",") + ")'/>");
      }
    }
    out.push("<image x='" + left + "' y='" + top + "' width='" + size + "' height='" + size +
      "' preserveAspectRatio='none' style='image-rendering:pixelated' href='" +
      this.picture.toDataURL("image/png") + "'/>");
    this.bands().forEach(function (band) {
      out.push("<rect x='" + (left + band[0] * cell) + "' y='" + top + "' width='" + (band[1] - band[0]) * cell +
        "' height='" + size + "' fill='url(#iv-hatch)'/>");
      out.push("<rect x='" + left + "' y='" + (top + band[0] * cell) + "' width='" + size + "' height='" +
        (band[1] - band[0]) * cell + "' fill='url(#iv-hatch)'/>");
    });
    var limits = this.limits(), current = this.current, real = this.prompts[this.p].real;
    STRIPS.forEach(function (strip, i) {
      var x = left + size + 20 + i * (STRIP_W + STRIP_GAP), values = current.metrics[strip[0]], d = "";
      out.push("<text x='" + x + "' y='" + (top - 22) + "' font-size='9'>" + xml(strip[1]) + "</text>");
      out.push("<text x='" + x + "' y='" + (top - 11) + "' font-size='9'>" +
        xml("(" + strip[2] + ", 0…" + fmt(limits[i]) + ")") + "</text>");
      out.push("<rect x='" + x + "' y='" + top + "' width='" + STRIP_W + "' height='" + size + "' fill='#f4f4f4'/>");
      for (var t = 0; t < n; t++) {
        var v = values[t];
        if (real[t] && !isNaN(v) && v > 0) {
          var w = (STRIP_W * Math.min(1, v / limits[i])).toFixed(2);
          d += "M" + x + "," + (top + t * cell).toFixed(2) + "h" + w + "v" + Math.max(cell, 0.5).toFixed(2) + "h-" + w + "z";
        }
      }
      out.push("<path d='" + d + "' fill='#3370b3'/>");
    });
    out.push("</svg>");
    return out.join("");
  };

  Viewer.prototype.exportAs = function (kind) {
    var url = kind === "png"
      ? this.composed().toDataURL("image/png")
      : "data:image/svg+xml;charset=utf-8," + encodeURIComponent(this.svg());
    var head = this.data.heads[this.k].label, prompt = this.prompts[this.p].index;
    var link = el("a");
    link.href = url;
    link.download = "interv-attention-" + head + "-prompt" + prompt + "." + kind;
    link.style.display = "none";
    this.root.appendChild(link);
    link.click();
    link.remove();
    this.root.ivLastExport = { kind: kind, url: url };
    return url;
  };

  Viewer.prototype.wire = function () {
    var self = this;
    ["prompt", "head"].forEach(function (name) {
      self.q(name).addEventListener("change", function () { self.select(); });
    });
    this.q("colour").addEventListener("change", function () { self.draw(); self.drawThumbs(); });
    this.q("zoom").addEventListener("change", function () { self.draw(); });
    this.q("text").addEventListener("change", function () { self.colourText(); });
    this.pattern.parentNode.addEventListener("mousemove", function (event) {
      var at = self.position(event, self.pattern);
      self.focus(at[0], at[1]);
    });
    this.strips.addEventListener("mousemove", function (event) {
      self.focus(self.position(event, self.strips)[0], -1);
    });
    this.pattern.addEventListener("keydown", function (event) {
      var moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
      var move = moves[event.key];
      if (!move) return;
      event.preventDefault();
      self.focus(Math.max(0, self.t + move[0]), Math.max(0, self.j + move[1]));
    });
    Array.prototype.forEach.call(this.root.querySelectorAll("[data-action]"), function (button) {
      button.addEventListener("click", function () { self.exportAs(button.getAttribute("data-action")); });
    });
    this.root.ivViewer = this;
  };

  function init(root) {
    if (root.getAttribute("data-init")) return;
    root.setAttribute("data-init", "1");
    root.classList.add("iv-js");
    var started = performance.now();
    try {
      var data = JSON.parse(root.querySelector("script.iv-data").textContent);
      var viewer = new Viewer(root, data);
      viewer.wire();
      viewer.p = -1;
      viewer.select().then(function () {
        var ms = performance.now() - started;
        performance.mark("interv-attention-drawn");
        root.setAttribute("data-draw-ms", ms.toFixed(1));
        root.setAttribute("data-ready", "1");
      }).catch(function (error) { fail(root, error); });
    } catch (error) {
      fail(root, error);
    }
  }

  function fail(root, error) {
    var message = el("p", "iv-error", "interv attention viewer: " + (error && error.message || error));
    root.insertBefore(message, root.firstChild);
    root.setAttribute("data-ready", "error");
    if (window.console) console.error(error);
  }

  Array.prototype.forEach.call(document.querySelectorAll(".interv-attention"), init);
})();

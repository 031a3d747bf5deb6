// The results table: sort by a column, click a row for its atom picture. No libraries.
(function () {
  "use strict";
  var table = document.getElementById("results");
  if (!table) { return; }
  var body = table.tBodies[0];
  var headers = table.tHead.rows[0].cells;
  function key(row, col) {
    var cell = row.cells[col];
    var v = cell.getAttribute("data-sort");
    if (v === null) { v = cell.textContent; }
    var n = parseFloat(v);
    return v === "" ? null : (isNaN(n) ? v.toLowerCase() : n);
  }
  Array.prototype.forEach.call(headers, function (th, col) {
    if (th.classList.contains("nosort")) { return; }
    th.addEventListener("click", function () {
      var up = th.getAttribute("aria-sort") !== "ascending";
      Array.prototype.forEach.call(headers, function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", up ? "ascending" : "descending");
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = key(a, col), y = key(b, col);
        if (x === y) { return 0; }
        if (x === null) { return 1; }   // empty cells last, either way
        if (y === null) { return -1; }
        return (x < y ? -1 : 1) * (up ? 1 : -1);
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
  var panel = document.getElementById("picture");
  body.addEventListener("click", function (event) {
    var row = event.target.closest("tr");
    if (!row || row.classList.contains("failed")) { return; }
    Array.prototype.forEach.call(body.rows, function (r) { r.classList.remove("chosen"); });
    row.classList.add("chosen");
    var smiles = row.getAttribute("data-smiles");
    panel.textContent = "explaining " + smiles + " ...";
    fetch("explain", {
      method: "POST",
      headers: {"Content-Type": "application/json"},
      body: JSON.stringify({smiles: [smiles]})
    }).then(function (r) {
      return r.json().then(function (data) { return {ok: r.ok, data: data}; });
    }).then(function (answer) {
      if (!answer.ok) { panel.textContent = answer.data.detail; return; }
      var m = answer.data.molecules[0];
      if (m.svg) {
        panel.innerHTML = m.svg;  // drawn by the server (RDKit)
      } else {
        panel.textContent = m.error || m.picture_error;
      }
      panel.setAttribute("data-smiles", smiles);
    }).catch(function (err) { panel.textContent = "could not explain: " + err; });
  });
}());

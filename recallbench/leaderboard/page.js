// The leaderboard page's one script: sort the table by a column.
// Click a header to sort (numbers numerically, first click descending; missing values
// last either way); the address '#sort=KEY&dir=asc|desc' (or '?sort=...') opens the page
// sorted, and a click writes it, so a sorted view can be linked.  No network access.
(function () {
  "use strict";
  var table = document.getElementById("board");
  if (!table || !table.tHead || !table.tBodies.length) {
    return;
  }
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  var body = table.tBodies[0];

  function cellValue(row, i, numeric) {
    var cell = row.cells[i];
    if (!numeric) {
      return cell.textContent;
    }
    var raw = cell.getAttribute("data-sort");
    var x = raw === null || raw === "" ? NaN : parseFloat(raw);
    return isNaN(x) ? null : x;
  }

  function compare(a, b, numeric) {
    if (numeric) {
      return a < b ? -1 : (a > b ? 1 : 0);
    }
    return a.localeCompare(b);
  }

  function sortBy(i, dir) {
    var numeric = heads[i].getAttribute("data-type") === "num";
    var sign = dir === "asc" ? 1 : -1;
    var keyed = Array.prototype.slice.call(body.rows).map(function (row, k) {
      return {row: row, value: cellValue(row, i, numeric), index: k};
    });
    keyed.sort(function (a, b) {
      if (a.value === null || b.value === null) {
        return (a.value === null) - (b.value === null) || a.index - b.index;
      }
      return sign * compare(a.value, b.value, numeric) || a.index - b.index;
    });
    keyed.forEach(function (k) { body.appendChild(k.row); });
    heads.forEach(function (th, j) {
      if (j === i) {
        th.setAttribute("aria-sort", dir === "asc" ? "ascending" : "descending");
      } else {
        th.removeAttribute("aria-sort");
      }
    });
    table.setAttribute("data-sorted", heads[i].getAttribute("data-key") + " " + dir);
  }

  function indexOf(key) {
    for (var j = 0; j < heads.length; j++) {
      if (heads[j].getAttribute("data-key") === key) {
        return j;
      }
    }
    return -1;
  }

  heads.forEach(function (th, i) {
    var button = th.querySelector("button");
    if (!button) {
      return;
    }
    button.addEventListener("click", function () {
      var now = th.getAttribute("aria-sort");
      var numeric = th.getAttribute("data-type") === "num";
      var dir = now ? (now === "ascending" ? "desc" : "asc") : (numeric ? "desc" : "asc");
      sortBy(i, dir);
      if (window.history && window.history.replaceState) {
        window.history.replaceState(null, "", "#sort=" + th.getAttribute("data-key") + "&dir=" + dir);
      }
    });
  });

  var params = new URLSearchParams(window.location.hash.replace(/^#/, "") || window.location.search);
  var start = indexOf(params.get("sort"));
  if (start >= 0) {
    sortBy(start, params.get("dir") === "asc" ? "asc" : "desc");
  }
})();

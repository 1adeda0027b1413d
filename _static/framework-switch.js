// Pick a framework once; every page follows and remembers it (localStorage).
(function () {
  var KEY = "course-framework";
  var CHOICES = [["torch", "PyTorch"], ["paddle", "PaddlePaddle"], ["both", "Both"]];
  function stored() {
    try { var v = localStorage.getItem(KEY); } catch (e) { v = null; }
    return CHOICES.some(function (c) { return c[0] === v; }) ? v : "torch";
  }
  function apply(fw) {
    document.documentElement.setAttribute("data-framework", fw);
    try { localStorage.setItem(KEY, fw); } catch (e) { /* private mode: this page only */ }
    document.querySelectorAll(".fw-switch button").forEach(function (b) {
      b.setAttribute("aria-pressed", b.dataset.fw === fw ? "true" : "false");
    });
  }
  // Set before the body renders, so the hidden framework never flashes.
  document.documentElement.setAttribute("data-framework", stored());
  document.addEventListener("DOMContentLoaded", function () {
    var tagged = document.querySelector(".tag_torch, .tag_paddle, .only-torch, .only-paddle");
    // In the article's header bar, which the theme keeps at the top of the window: a
    // switch of its own that stuck over the article covered the first lines of whichever
    // cell scrolled under it.
    var header = document.querySelector(".bd-header-article .header-article-items__start");
    var article = document.querySelector("article.bd-article") || document.querySelector("main");
    if (tagged && (header || article)) {
      var bar = document.createElement("div");
      bar.className = "fw-switch";
      bar.setAttribute("role", "group");
      bar.setAttribute("aria-label", "Framework shown in code cells");
      var label = document.createElement("span");   // hidden in narrow windows (css)
      label.className = "fw-switch__label";
      label.textContent = "Code in: ";
      bar.appendChild(label);
      CHOICES.forEach(function (c) {
        var b = document.createElement("button");
        b.type = "button"; b.dataset.fw = c[0]; b.textContent = c[1];
        b.addEventListener("click", function () { apply(c[0]); });
        bar.appendChild(b);
      });
      if (header) { bar.classList.add("fw-switch--header"); header.appendChild(bar); }
      else { article.insertBefore(bar, article.firstChild); }
    }
    apply(stored());
  });
  // Another tab changed the choice: follow it.
  window.addEventListener("storage", function (e) { if (e.key === KEY) apply(stored()); });
})();

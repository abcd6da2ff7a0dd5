// Applies the saved theme before the first paint (a classic, render-blocking script, so a
// light-theme user never sees a dark flash). Kept out of the HTML so a strict
// Content-Security-Policy (script-src 'self') works.
(function () {
  let theme = "dark";
  try {
    const saved = window.localStorage.getItem("spool.theme");
    if (saved === "light" || saved === "dark") theme = saved;
  } catch {
    /* storage disabled: keep the default */
  }
  document.documentElement.setAttribute("data-theme", theme);
})();

// keygate dashboard: progressive enhancement only (every action works without it).
// A "Copy" button beside a read-only field copies its value.
document.querySelectorAll("button[data-copy-target]").forEach(function (button) {
  var field = document.getElementById(button.getAttribute("data-copy-target"));
  if (!field || !navigator.clipboard) return;
  button.hidden = false;
  button.addEventListener("click", function () {
    navigator.clipboard.writeText(field.value).then(function () { button.textContent = "Copied"; });
  });
});

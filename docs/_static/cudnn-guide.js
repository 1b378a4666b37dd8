// Fold the full environment table of each recorded page into a closed <details>: the one-line
// "Measured on" stamp above it already names the GPU and software, and the environment page
// (plot_01) keeps its table open. Nothing is hidden that a click does not show.
document.addEventListener("DOMContentLoaded", () => {
  const environmentPage = /plot_01_environment/.test(window.location.pathname);
  document.querySelectorAll("table.cg-env-table").forEach((table) => {
    if (table.closest("details")) return;
    const details = document.createElement("details");
    details.className = "cg-env";
    details.open = environmentPage;
    const summary = document.createElement("summary");
    summary.textContent = `Full environment (${table.rows.length} rows)`;
    table.parentNode.insertBefore(details, table);
    details.append(summary, table);
  });
});

// Each cuDNN Frontend name in a page's code (`cudnn.pygraph`, `g.sdpa`, `O.set_output`) links to
// its row in the frontend API index, which lists the pages that use it. The names and row ids
// come from the build (_static/frontend-names.json); without them the code stays as it is.
document.addEventListener("DOMContentLoaded", () => {
  if (!/\/auto_examples\/plot_/.test(window.location.pathname)) return;
  const root = document.documentElement.dataset.content_root || "../";
  fetch(`${root}_static/frontend-names.json`)
    .then((r) => (r.ok ? r.json() : {}))
    .then((ids) => {
      document.querySelectorAll("div.highlight-Python pre span.n, div.highlight-python pre span.n, div.highlight-Python pre span.nf").forEach((span) => {
        const dot = span.previousElementSibling;
        const id = ids[span.textContent];
        if (!id || !dot || dot.textContent !== "." || span.closest("a")) return;
        const a = document.createElement("a");
        a.className = "cg-fe";
        a.href = `${root}frontend_api.html#${id}`;
        a.title = "cuDNN Frontend API index: the pages that use it";
        span.replaceWith(a);
        a.append(span);
      });
    })
    .catch(() => {});
});

// On a phone, a multi-panel figure shrunk to the screen cannot be read: each gallery figure
// sits in its own box that scrolls sideways, at a readable width (CSS: .cg-figure).
document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("img.sphx-glr-single-img, img.sphx-glr-multi-img").forEach((img) => {
    if (img.parentElement.classList.contains("cg-figure")) return;
    const box = document.createElement("div");
    box.className = "cg-figure";
    img.parentNode.insertBefore(box, img);
    box.append(img);
  });
});

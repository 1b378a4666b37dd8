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

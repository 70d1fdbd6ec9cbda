// Line charts of the last hour (the dashboard keeps the samples in memory: /api/history).
"use strict";

const CHART_COLOURS = ["#58a6ff", "#3fb950", "#d29922", "#f778ba", "#a5d6ff", "#ff7b72"];
const HOUR = 3600;

function svgEl(tag, attrs, text) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function niceMax(value) {
  if (value <= 0) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const m of [1, 2, 5, 10]) if (m * power >= value) return m * power;
  return 10 * power;
}

// series: {label: [[epochSeconds, value], ...]}; now: epoch seconds of the right edge.
function drawChart(svg, series, now) {
  svg.replaceChildren();
  const width = svg.clientWidth || 900;
  const height = svg.clientHeight || 180;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const left = 56, right = 12, top = 12, bottom = 40;
  const w = width - left - right, h = height - top - bottom;
  const labels = Object.keys(series);
  const max = niceMax(Math.max(0, ...labels.flatMap((k) => series[k].map((p) => p[1]))));
  const x = (t) => left + w * (1 - (now - t) / HOUR);
  const y = (v) => top + h * (1 - v / max);
  svg.append(svgEl("rect", { class: "plot", x: left, y: top, width: w, height: h }));
  for (const frac of [0, 0.5, 1]) {
    const value = max * frac;
    svg.append(svgEl("line", { class: "gridline", x1: left, x2: left + w, y1: y(value), y2: y(value) }));
    svg.append(svgEl("text", { class: "axis", x: left - 6, y: y(value) + 4, "text-anchor": "end" }, String(+value.toFixed(2))));
  }
  for (const minutes of [60, 45, 30, 15, 0]) {
    svg.append(svgEl("text", { class: "axis", x: x(now - minutes * 60), y: top + h + 16, "text-anchor": "middle" },
      minutes ? `-${minutes} min` : "now"));
  }
  let legendX = left;
  labels.forEach((label, i) => {
    const colour = CHART_COLOURS[i % CHART_COLOURS.length];
    const points = series[label].filter((p) => now - p[0] <= HOUR).map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`);
    if (points.length === 1) points.push(points[0]);
    svg.append(svgEl("polyline", { class: "series", "data-series": label, points: points.join(" "), stroke: colour }));
    svg.append(svgEl("rect", { x: legendX, y: height - 12, width: 10, height: 10, fill: colour }));
    const text = svgEl("text", { class: "axis", x: legendX + 14, y: height - 3 }, label);
    svg.append(text);
    legendX += 24 + 7 * label.length;
  });
  if (!labels.length) svg.append(svgEl("text", { class: "axis", x: left + 10, y: top + 20 }, "no samples yet"));
}

//! Results for machines (JSON) and people (a Markdown table), and where
//! they go.

use std::path::Path;

use anyhow::Context as _;
use serde_json::{Map, Value, json};

use crate::hist::{self, Hist};

/// One scenario's results.
#[derive(Debug)]
pub(crate) struct Report {
    scenario: String,
    params: Value,
    results: Map<String, Value>,
    rows: Vec<[String; 3]>,
    charts: Vec<(String, Hist)>,
}

impl Report {
    /// An empty report of `scenario` run with `params`.
    pub(crate) fn new(scenario: &str, params: Value) -> Self {
        Self {
            scenario: scenario.to_owned(),
            params,
            results: Map::new(),
            rows: Vec::new(),
            charts: Vec::new(),
        }
    }

    /// Adds a figure: `key` in JSON, `label` and `unit` in the table.
    pub(crate) fn metric(&mut self, key: &str, label: &str, value: impl Into<Value>, unit: &str) {
        let value = value.into();
        self.rows
            .push([label.to_owned(), show(&value), unit.to_owned()]);
        self.results.insert(key.to_owned(), value);
    }

    /// Adds detail to the JSON only.
    pub(crate) fn detail(&mut self, key: &str, value: impl Into<Value>) {
        self.results.insert(key.to_owned(), value.into());
    }

    /// Adds a histogram (µs): its summary in JSON, p50/p99/max in the
    /// table, and a curve in the chart.
    pub(crate) fn histogram(&mut self, key: &str, label: &str, h: &Hist) {
        self.histogram_row(key, label, h);
        if !h.is_empty() {
            self.charts.push((label.to_owned(), h.clone()));
        }
    }

    /// Adds a histogram (µs) to the JSON and the table, not the chart.
    pub(crate) fn histogram_row(&mut self, key: &str, label: &str, h: &Hist) {
        let s = hist::summary(h);
        self.rows.push([
            format!("{label} p50 / p99 / max"),
            format!("{} / {} / {}", s.p50_ms, s.p99_ms, s.max_ms),
            "ms".to_owned(),
        ]);
        self.results.insert(
            key.to_owned(),
            serde_json::to_value(&s).unwrap_or(Value::Null),
        );
        if !h.is_empty() {
            self.charts.push((label.to_owned(), h.clone()));
        }
    }

    /// Adds a curve to the chart only.
    pub(crate) fn chart(&mut self, label: &str, h: &Hist) {
        if !h.is_empty() {
            self.charts.push((label.to_owned(), h.clone()));
        }
    }

    /// The report as JSON.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "scenario": self.scenario,
            "params": self.params,
            "results": self.results,
        })
    }

    /// The report as Markdown: a heading, the parameters, a table.
    pub(crate) fn to_markdown(&self) -> String {
        let mut out = format!("### loadtest {}\n\n", self.scenario);
        if let Some(params) = self.params.as_object() {
            let list: Vec<String> = params
                .iter()
                .map(|(k, v)| format!("{k}={}", show(v)))
                .collect();
            out.push_str(&format!("Parameters: {}\n\n", list.join(", ")));
        }
        out.push_str("| metric | value | unit |\n| --- | ---: | --- |\n");
        for [label, value, unit] in &self.rows {
            out.push_str(&format!("| {label} | {value} | {unit} |\n"));
        }
        out
    }

    /// Prints the Markdown, and writes the JSON, Markdown and chart where
    /// asked.
    pub(crate) fn emit(
        &self,
        json_path: Option<&Path>,
        markdown_path: Option<&Path>,
        svg_path: Option<&Path>,
    ) -> anyhow::Result<()> {
        let markdown = self.to_markdown();
        println!("{markdown}");
        if let Some(path) = json_path {
            let text = serde_json::to_string_pretty(&self.to_json())?;
            std::fs::write(path, text + "\n")
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        if let Some(path) = markdown_path {
            std::fs::write(path, markdown)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        if let Some(path) = svg_path {
            let title = format!("loadtest {}", self.scenario);
            crate::chart::percentiles(path, &title, &self.charts)?;
        }
        Ok(())
    }
}

/// A value as a table cell: strings bare, floats trimmed.
fn show(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{}", hist::round2(f)),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_lists_params_and_rows() {
        let mut r = Report::new("idle", json!({"connections": 10}));
        r.metric("rss_per_conn_kib", "RSS per connection", 1.23456, "KiB");
        r.metric("opened", "opened", 10, "");
        let md = r.to_markdown();
        assert!(md.contains("Parameters: connections=10"));
        assert!(md.contains("| RSS per connection | 1.23 | KiB |"));
        assert_eq!(r.to_json()["results"]["opened"], 10);
    }
}

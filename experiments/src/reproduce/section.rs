//! What a reproduction section reports: one line per compared figure,
//! with its verdict against the paper.

use serde::Serialize;

/// How our number relates to the paper's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Verdict {
    /// Same figure at the paper's precision, or the stated claim holds.
    Match,
    /// Differs; the note says why.
    Differs,
    /// A statistical comparison whose samples are too few to tell either
    /// way (no 95 % interval excludes the paper's claim nor confirms it).
    Inconclusive,
    /// The paper gives no number: ours only.
    OursOnly,
    /// Not computed here (see the note).
    NotHere,
}

impl Verdict {
    pub fn mark(self) -> &'static str {
        match self {
            Verdict::Match => "✔ match",
            Verdict::Differs => "✘ differs",
            Verdict::Inconclusive => "≈ inconclusive",
            Verdict::OursOnly => "— ours only",
            Verdict::NotHere => "· not here",
        }
    }
}

/// One compared figure.
#[derive(Clone, Debug, Serialize)]
pub struct Line {
    pub what: String,
    pub paper: String,
    pub ours: String,
    pub verdict: Verdict,
    pub command: String,
    pub note: String,
    /// The numbers behind a statistical verdict (seed 003's latency
    /// orderings: per protocol n, mean and interval; per ordered pair the
    /// difference and its interval), for the tests and `--json` readers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<serde_json::Value>,
}

/// One experiment.
#[derive(Clone, Debug, Serialize)]
pub struct Section {
    pub id: &'static str,
    pub title: &'static str,
    /// Where the paper figures come from.
    pub source: &'static str,
    pub lines: Vec<Line>,
    pub notes: Vec<String>,
    pub seconds: f64,
}

pub fn line(what: impl Into<String>, paper: impl Into<String>, ours: impl Into<String>) -> Line {
    Line {
        what: what.into(),
        paper: paper.into(),
        ours: ours.into(),
        verdict: Verdict::OursOnly,
        command: String::new(),
        note: String::new(),
        stats: None,
    }
}

impl Line {
    pub fn verdict(mut self, v: Verdict) -> Self {
        self.verdict = v;
        self
    }
    pub fn matches(self, ok: bool) -> Self {
        self.verdict(if ok { Verdict::Match } else { Verdict::Differs })
    }
    pub fn cmd(mut self, c: impl Into<String>) -> Self {
        self.command = c.into();
        self
    }
    pub fn note(mut self, n: impl Into<String>) -> Self {
        self.note = n.into();
        self
    }
}

//! Plain-text layout: tables that fit a terminal width, and colour that is only ever added to
//! already laid-out text (so widths never count escape codes).

/// Width every line of text output fits in.
pub const WIDTH: usize = 100;

/// A colour for a cell; shown only when stdout is a terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Colour {
    /// Healthy.
    Green,
    /// Worth a look.
    Yellow,
    /// Something to act on.
    Red,
    /// Less important.
    Dim,
}

impl Colour {
    fn code(self) -> &'static str {
        match self {
            Colour::Green => "32",
            Colour::Yellow => "33",
            Colour::Red => "31",
            Colour::Dim => "2",
        }
    }
}

/// Whether output gets colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    /// Colour on (stdout is a terminal).
    pub colour: bool,
}

impl Style {
    /// No colour (pipes, files, tests).
    pub const PLAIN: Style = Style { colour: false };

    /// `text` in `colour` when colour is on.
    pub fn paint(self, text: &str, colour: Option<Colour>) -> String {
        match colour {
            Some(c) if self.colour && !text.is_empty() => {
                format!("\u{1b}[{}m{text}\u{1b}[0m", c.code())
            }
            _ => text.to_owned(),
        }
    }

    /// `text` in bold when colour is on.
    pub fn bold(self, text: &str) -> String {
        if self.colour {
            format!("\u{1b}[1m{text}\u{1b}[0m")
        } else {
            text.to_owned()
        }
    }
}

/// `text` cut to `max` characters, the last one an ellipsis when something was cut.
pub fn truncate(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    if max == 0 {
        return String::new();
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('…');
    out
}

/// `text` cut to `max` characters from the start, the first one an ellipsis when something was
/// cut (for names whose end tells them apart: `…-analytics-7`).
pub fn truncate_start(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    if max == 0 {
        return String::new();
    }
    let mut out = String::from('…');
    out.extend(text.chars().skip(count - (max - 1)));
    out
}

/// A table cell: its text and colour.
#[derive(Clone, Debug)]
pub struct Cell {
    /// What is shown.
    pub text: String,
    /// Its colour, if any.
    pub colour: Option<Colour>,
    /// Cut from the start rather than the end when too long.
    pub keep_end: bool,
}

impl Cell {
    /// A cell without colour.
    pub fn plain(text: impl Into<String>) -> Self {
        Cell {
            text: text.into(),
            colour: None,
            keep_end: false,
        }
    }

    /// A cell cut from the start when too long (names that differ at the end).
    pub fn name(text: impl Into<String>) -> Self {
        Cell {
            text: text.into(),
            colour: None,
            keep_end: true,
        }
    }

    /// A coloured cell.
    pub fn coloured(text: impl Into<String>, colour: Option<Colour>) -> Self {
        Cell {
            text: text.into(),
            colour,
            keep_end: false,
        }
    }
}

/// Lays out `rows` under `headers`, indented by `indent` spaces, columns two spaces apart. Every
/// column but the last is as wide as its widest cell but at most `max_col`; the last column takes
/// what is left of [`WIDTH`]. Cells that do not fit are cut with an ellipsis.
pub fn table(
    indent: usize,
    headers: &[&str],
    rows: &[Vec<Cell>],
    max_col: usize,
    style: Style,
) -> Vec<String> {
    let columns = headers.len();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(columns) {
            let cap = if i + 1 == columns {
                usize::MAX
            } else {
                max_col
            };
            widths[i] = widths[i].max(cell.text.chars().count().min(cap));
        }
    }
    let fixed: usize = indent + widths[..columns - 1].iter().map(|w| w + 2).sum::<usize>();
    let last = WIDTH.saturating_sub(fixed).max(1);
    widths[columns - 1] = widths[columns - 1].min(last);
    let line = |cells: Vec<(String, Option<Colour>, bool)>, bold: bool| {
        let mut out = " ".repeat(indent);
        let n = cells.len();
        for (i, (text, colour, keep_end)) in cells.into_iter().enumerate() {
            let cut = if keep_end {
                truncate_start(&text, widths[i])
            } else {
                truncate(&text, widths[i])
            };
            let pad = if i + 1 < n {
                " ".repeat(widths[i] - cut.chars().count() + 2)
            } else {
                String::new()
            };
            let shown = if bold {
                style.bold(&cut)
            } else {
                style.paint(&cut, colour)
            };
            out.push_str(&shown);
            out.push_str(&pad);
        }
        out.trim_end().to_owned()
    };
    let mut out = vec![line(
        headers
            .iter()
            .map(|h| ((*h).to_owned(), None, false))
            .collect(),
        true,
    )];
    for row in rows {
        out.push(line(
            row.iter()
                .take(columns)
                .map(|c| (c.text.clone(), c.colour, c.keep_end))
                .collect(),
            false,
        ));
    }
    out
}

/// How long ago `then` was, seen at `now`, as kubectl shows ages (`45s`, `12m`, `5h`, `3d`).
pub fn age(now: jiff::Timestamp, then: jiff::Timestamp) -> String {
    let secs = now.as_second() - then.as_second();
    if secs < 0 {
        return format!("in {}", duration(-secs));
    }
    duration(secs)
}

/// A number of seconds as `45s`, `12m`, `5h` or `3d`.
pub fn duration(secs: i64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 120 * 60 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_cells_are_cut_to_the_width() {
        let rows = vec![vec![Cell::plain("a"), Cell::plain("x".repeat(300))]];
        let lines = table(2, &["A", "MESSAGE"], &rows, 20, Style::PLAIN);
        assert!(
            lines.iter().all(|l| l.chars().count() <= WIDTH),
            "{lines:?}"
        );
        assert!(lines[1].ends_with('…'));
    }

    #[test]
    fn names_keep_their_distinguishing_end() {
        assert_eq!(truncate_start("inventory-analytics-7", 10), "…alytics-7");
        assert_eq!(truncate_start("a-7", 10), "a-7");
    }

    #[test]
    fn colour_does_not_change_the_layout() {
        let rows = vec![vec![
            Cell::coloured("yes", Some(Colour::Green)),
            Cell::plain("z"),
        ]];
        let plain = table(0, &["READY", "X"], &rows, 20, Style::PLAIN);
        let coloured = table(0, &["READY", "X"], &rows, 20, Style { colour: true });
        let stripped = coloured[1]
            .replace("\u{1b}[32m", "")
            .replace("\u{1b}[0m", "");
        assert_eq!(plain[1], stripped);
        assert_ne!(plain[1], coloured[1]);
    }

    #[test]
    fn ages_read_like_kubectl() {
        let now = jiff::Timestamp::from_second(1_000_000).unwrap();
        let at = |s: i64| jiff::Timestamp::from_second(1_000_000 - s).unwrap();
        assert_eq!(age(now, at(45)), "45s");
        assert_eq!(age(now, at(600)), "10m");
        assert_eq!(age(now, at(5 * 3600)), "5h");
        assert_eq!(age(now, at(3 * 86400)), "3d");
        assert_eq!(age(now, at(-7200)), "in 2h");
    }
}

//! Plain aligned text tables for terminal reports.

/// A table with a header row; columns are right-aligned when `right[i]` is set.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    right: Vec<bool>,
}

impl Table {
    pub fn new(header: &[&str], right: &[bool]) -> Table {
        Table {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
            right: right.to_vec(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let n = self.header.len();
        let mut w = vec![0usize; n];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |r: &Vec<String>| -> String {
            let cells: Vec<String> = (0..n)
                .map(|i| {
                    let c = r.get(i).map(String::as_str).unwrap_or("");
                    if self.right.get(i).copied().unwrap_or(false) {
                        format!("{c:>width$}", width = w[i])
                    } else {
                        format!("{c:<width$}", width = w[i])
                    }
                })
                .collect();
            format!("  {}", cells.join("  ").trim_end())
        };
        let mut out = String::new();
        out.push_str(&line(&self.header));
        out.push('\n');
        let total: usize = w.iter().sum::<usize>() + 2 * n.saturating_sub(1);
        out.push_str(&format!("  {}\n", "-".repeat(total)));
        for r in &self.rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        out
    }
}

//! CSV tables with a header, the shape of the study inputs vantage reads (ratings,
//! counter reads): blank lines and `#` comments skipped, fields trimmed, a field with
//! commas in double quotes (`""` inside is a quote). Every row is kept with its line
//! number, so a bad value can be named by line and column.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CsvError {
    #[error("no header line")]
    NoHeader,
    #[error("line {line}: a double quote is not closed")]
    UnclosedQuote { line: usize },
    #[error("line {line}: {got} fields where the header has {expected}")]
    FieldCount {
        line: usize,
        got: usize,
        expected: usize,
    },
    #[error("line {line}: the header has no column '{column}'")]
    MissingColumn { line: usize, column: String },
}

/// One data line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvRow {
    /// From 1, counting every line of the text.
    pub line: usize,
    /// As many as the header has.
    pub fields: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvTable {
    pub header_line: usize,
    pub header: Vec<String>,
    pub rows: Vec<CsvRow>,
}

impl CsvTable {
    pub fn parse(text: &str) -> Result<CsvTable, CsvError> {
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(index, line)| (index + 1, line.trim()))
            .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'));
        let (header_line, header) = lines.next().ok_or(CsvError::NoHeader)?;
        let header = split_fields(header, header_line)?;
        let rows = lines
            .map(|(line, text)| {
                let fields = split_fields(text, line)?;
                if fields.len() != header.len() {
                    return Err(CsvError::FieldCount {
                        line,
                        got: fields.len(),
                        expected: header.len(),
                    });
                }
                Ok(CsvRow { line, fields })
            })
            .collect::<Result<_, _>>()?;
        Ok(CsvTable {
            header_line,
            header,
            rows,
        })
    }

    /// The index of column `name`, if the header has it.
    pub fn optional_column(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|column| column == name)
    }

    /// The index of column `name`, which the header must have.
    pub fn column(&self, name: &str) -> Result<usize, CsvError> {
        self.optional_column(name)
            .ok_or_else(|| CsvError::MissingColumn {
                line: self.header_line,
                column: name.to_string(),
            })
    }
}

fn split_fields(line: &str, line_number: usize) -> Result<Vec<String>, CsvError> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut field).trim().to_string()),
            (c, _) => field.push(c),
        }
    }
    if quoted {
        return Err(CsvError::UnclosedQuote { line: line_number });
    }
    fields.push(field.trim().to_string());
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_quoted_fields_with_line_numbers_and_names_what_is_wrong() {
        let table =
            CsvTable::parse("# ratings\n\ncondition, score\n\"a,b\",4\n\"say \"\"hi\"\"\", 5\n")
                .unwrap();
        assert_eq!(table.header_line, 3);
        assert_eq!(table.column("score"), Ok(1));
        assert_eq!(table.optional_column("subject"), None);
        assert_eq!(
            table.rows,
            [
                CsvRow {
                    line: 4,
                    fields: vec!["a,b".into(), "4".into()]
                },
                CsvRow {
                    line: 5,
                    fields: vec!["say \"hi\"".into(), "5".into()]
                }
            ]
        );
        assert_eq!(
            table.column("subject").unwrap_err().to_string(),
            "line 3: the header has no column 'subject'"
        );
        assert_eq!(CsvTable::parse("\n# nothing\n"), Err(CsvError::NoHeader));
        assert_eq!(
            CsvTable::parse("a,b\n1\n").unwrap_err().to_string(),
            "line 2: 1 fields where the header has 2"
        );
        assert_eq!(
            CsvTable::parse("a,b\n\"1,2\n").unwrap_err().to_string(),
            "line 2: a double quote is not closed"
        );
    }
}

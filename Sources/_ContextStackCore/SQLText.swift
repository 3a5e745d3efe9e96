/// Quoting for SQL text: identifiers and string literals, written the same in every dialect.
extension String {
    /// The string as an SQL identifier in double quotes, with inner quotes doubled.
    package var quotedIdentifier: String {
        // Names almost never hold a quote: Foundation's search-and-replace costs microseconds,
        // and by-key reads build their SQL on every call.
        guard utf8.contains(UInt8(ascii: "\"")) else { return "\"" + self + "\"" }
        return "\"" + replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}

extension String {
    /// The string as an SQL string literal in single quotes, with inner quotes doubled.
    package var quotedLiteral: String { "'" + replacingOccurrences(of: "'", with: "''") + "'" }
}

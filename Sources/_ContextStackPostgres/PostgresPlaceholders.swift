/// ContextStack's `?` placeholders as PostgreSQL's numbered ones.
///
/// Every layer above the client writes SQL with `?` bound in order (SQLite's convention, and
/// the one `SQLDialect` and `QueryConnection` document), because statements are assembled from
/// fragments whose final positions are known only at the end. PostgreSQL numbers its
/// parameters, so the connection rewrites a statement once, when it prepares it.
///
/// A `?` inside a string literal (`'…'`, with `''` for a quote), a quoted identifier (`"…"`,
/// with `""`), or a comment (`-- …` to the end of the line, `/* … */`) is left alone.
/// ContextStack writes no other form that could hold one (no `E'…'` strings, no dollar
/// quoting, no jsonb `?` operators).
package enum PostgresPlaceholders {
    /// `sql` with its `?` placeholders numbered `$1`, `$2`, … in order.
    package static func numbered(_ sql: String) -> String {
        guard sql.utf8.contains(UInt8(ascii: "?")) else { return sql }
        enum State { case code, literal, identifier, lineComment, blockComment }
        var state = State.code
        var output: [UInt8] = []
        output.reserveCapacity(sql.utf8.count + 16)
        var number = 0
        var previous: UInt8 = 0
        for byte in sql.utf8 {
            switch state {
            case .code:
                switch byte {
                case UInt8(ascii: "?"):
                    number += 1
                    output.append(UInt8(ascii: "$"))
                    output.append(contentsOf: String(number).utf8)
                    previous = 0
                    continue
                case UInt8(ascii: "'"): state = .literal
                case UInt8(ascii: "\""): state = .identifier
                case UInt8(ascii: "-") where previous == UInt8(ascii: "-"): state = .lineComment
                case UInt8(ascii: "*") where previous == UInt8(ascii: "/"):
                    // Forget the `*`, so that `/*/` does not read as opened and closed.
                    state = .blockComment
                    output.append(byte)
                    previous = 0
                    continue
                default: break
                }
            case .literal:
                // A doubled quote closes and reopens: the state flips twice and ends where it began.
                if byte == UInt8(ascii: "'") { state = .code }
            case .identifier:
                if byte == UInt8(ascii: "\"") { state = .code }
            case .lineComment:
                if byte == UInt8(ascii: "\n") { state = .code }
            case .blockComment:
                if byte == UInt8(ascii: "/") && previous == UInt8(ascii: "*") {
                    state = .code
                    output.append(byte)
                    previous = 0
                    continue
                }
            }
            output.append(byte)
            previous = byte
        }
        return String(decoding: output, as: UTF8.self)
    }
}

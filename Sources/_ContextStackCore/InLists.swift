/// `IN (…)` lists over many keys, the same for every store.
package enum InLists {
    /// The most keys one `IN (…)` list binds.
    package static let maximumWidth = 512

    /// Runs `body` once per chunk of `keys`, with the placeholders of an `IN (…)` list
    /// (`?, ?, …`) and the values to bind to them: the one way ContextStack reads or writes
    /// rows by many keys.
    ///
    /// Chunks hold at most `maximumWidth` keys and are padded to a power of two by
    /// repeating their last key, which changes nothing in an `IN` list, so a handful of
    /// statement texts — prepared once, then cached — serve every number of keys.
    package static func each(_ keys: [Int64], _ body: (_ placeholders: String, _ arguments: [Value]) throws -> Void) rethrows {
        for start in stride(from: 0, to: keys.count, by: maximumWidth) {
            let chunk = keys[start..<min(start + maximumWidth, keys.count)]
            var width = 1
            while width < chunk.count { width *= 2 }
            let padded = chunk + repeatElement(chunk[chunk.endIndex - 1], count: width - chunk.count)
            try body(placeholders[width.trailingZeroBitCount], padded.map { .integer($0) })
        }
    }

    /// The placeholders of a list of each width, 1, 2, 4, … `maximumWidth`, written once:
    /// joining 512 of them for every chunk was 4 % of walking a cursor.
    private static let placeholders: [String] = (0...maximumWidth.trailingZeroBitCount).map { power in
        Array(repeating: "?", count: 1 << power).joined(separator: ", ")
    }
}

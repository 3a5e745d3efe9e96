import Foundation

/// The string operators, implemented once: SQL calls this code through a function registered
/// on every connection (`cs_text`), and in-memory evaluation calls it directly, so both give
/// the same answer on every input.
package enum TextMatch {
    /// The outcome of `op` on `value` and `pattern`; `nil` when `value` is NULL (unknown).
    package static func evaluate(_ op: TextOperator, _ options: MatchOptions, _ value: Value, _ pattern: String) -> Bool? {
        guard case .text(let text) = value else { return value.isNull ? nil : false }
        return evaluate(op, options, text, pattern)
    }

    package static func evaluate(_ op: TextOperator, _ options: MatchOptions, _ text: String, _ pattern: String) -> Bool {
        if op == .matches { return regularExpression(pattern, options).map { matchesWhole($0, fold(text, options.subtracting(.caseInsensitive))) } ?? false }
        var value = fold(text, options)
        var wanted = fold(pattern, options)
        switch op {
        case .contains, .beginsWith, .endsWith:
            // On UTF-8 bytes: equal scalar sequences are equal byte sequences, and a valid UTF-8
            // pattern found in valid UTF-8 text always starts and ends on scalar boundaries.
            return value.withUTF8 { text in
                wanted.withUTF8 { wanted in
                    guard wanted.count <= text.count else { return false }
                    if wanted.isEmpty { return true }
                    switch op {
                    case .beginsWith: return memcmp(text.baseAddress!, wanted.baseAddress!, wanted.count) == 0
                    case .endsWith: return memcmp(text.baseAddress! + (text.count - wanted.count), wanted.baseAddress!, wanted.count) == 0
                    default: return contains(text, wanted)
                    }
                }
            }
        case .like:
            return like(Array(value.unicodeScalars)[...], wanted)
        case .matches:
            return false
        }
    }

    /// The least text greater than every text that begins with `prefix`, in the order of
    /// scalar values (which is UTF-8's byte order): `prefix` with its last scalar raised by
    /// one, after dropping trailing U+10FFFF (which has no successor), surrogates skipped.
    /// `nil` when there is none (an empty prefix, or one of U+10FFFF only): every text from
    /// `prefix` up begins with it.
    ///
    /// The kept scalars are copied as they lie (their UTF-8 bytes, one copy): removing scalars
    /// from a `String.UnicodeScalarView` one at a time was a tenth of a short prefix query.
    /// A prefix that ends in an ASCII scalar below U+007F (whose successor is one byte too)
    /// raises that byte in a copy of the bytes: going through the scalars cost 720
    /// instructions of a 43 k-instruction prefix query.
    package static func prefixSuccessor(_ prefix: String) -> String? {
        var prefix = prefix
        if let raised = prefix.withUTF8({ bytes -> String? in
            guard let last = bytes.last, last < 0x7F else { return nil }
            return String(unsafeUninitializedCapacity: bytes.count) { (copy: UnsafeMutableBufferPointer<UInt8>) in
                _ = copy.initialize(fromContentsOf: bytes)
                copy[bytes.count - 1] = last + 1
                return bytes.count
            }
        }) {
            return raised
        }
        let scalars = prefix.unicodeScalars
        var end = scalars.endIndex
        while end > scalars.startIndex {
            let lastIndex = scalars.index(before: end)
            let last = scalars[lastIndex]
            guard last.value < 0x10FFFF else {
                end = lastIndex
                continue
            }
            var successor = String(scalars[..<lastIndex])
            successor.unicodeScalars.append(Unicode.Scalar(last.value == 0xD7FF ? 0xE000 : last.value + 1)!)
            return successor
        }
        return nil
    }

    /// The text with case and/or diacritics folded away, as the options ask; unchanged otherwise
    /// (so comparison stays exact, scalar by scalar).
    ///
    /// Decomposed first, so that precomposed and combining forms fold alike, and composed again
    /// after (NFC), so that a letter keeps its accents: under `[c]` alone "é" is still not "e",
    /// and "José" neither begins with "jose" nor fails `LIKE[c] 'jos?'` (decomposed, it was "jose"
    /// and a combining accent: two scalars where the pattern saw one).
    package static func fold(_ text: String, _ options: MatchOptions) -> String {
        var folding: String.CompareOptions = []
        if options.contains(.caseInsensitive) { folding.insert(.caseInsensitive) }
        if options.contains(.diacriticInsensitive) { folding.insert(.diacriticInsensitive) }
        guard !folding.isEmpty else { return text }
        // ASCII has no accents to fold, and its case folding is lower case.
        if text.utf8.allSatisfy({ $0 < 0x80 }) { return folding.contains(.caseInsensitive) ? text.lowercased() : text }
        return text.decomposedStringWithCanonicalMapping.folding(options: folding, locale: nil).precomposedStringWithCanonicalMapping
    }

    /// Whether `wanted` (not empty, not longer) occurs in `text`: memchr finds each candidate
    /// first byte, memcmp checks the rest.
    private static func contains(_ text: UnsafeBufferPointer<UInt8>, _ wanted: UnsafeBufferPointer<UInt8>) -> Bool {
        let base = text.baseAddress!
        let first = Int32(wanted[0])
        var start = 0
        let last = text.count - wanted.count
        while start <= last {
            guard let found = memchr(base + start, first, last - start + 1) else { return false }
            let offset = base.distance(to: found.assumingMemoryBound(to: UInt8.self))
            if memcmp(base + offset, wanted.baseAddress!, wanted.count) == 0 { return true }
            start = offset + 1
        }
        return false
    }

    /// One element of a LIKE pattern.
    private enum LikeElement: Equatable {
        /// `*`: any run of scalars, the empty one included.
        case anyRun
        /// `?`: exactly one scalar.
        case anyOne
        /// A scalar that matches itself: any other scalar, or one after a backslash.
        case literal(Unicode.Scalar)
    }

    /// A LIKE pattern's elements: `*` and `?` are wildcards, and a backslash makes the scalar
    /// after it literal (`a\*b` matches "a*b", `\\` a backslash), as in Apple's and GNUstep's
    /// implementations. A backslash at the very end stands for itself.
    private static func likeElements(_ pattern: String) -> [LikeElement] {
        var elements: [LikeElement] = []
        var escaped = false
        for scalar in pattern.unicodeScalars {
            if escaped {
                elements.append(.literal(scalar))
                escaped = false
                continue
            }
            switch scalar {
            case "\\": escaped = true
            case "*": elements.append(.anyRun)
            case "?": elements.append(.anyOne)
            default: elements.append(.literal(scalar))
            }
        }
        if escaped { elements.append(.literal("\\")) }
        return elements
    }

    /// The whole text against a LIKE pattern, backtracking to the last `*` on a mismatch.
    private static func like(_ text: ArraySlice<Unicode.Scalar>, _ pattern: String) -> Bool {
        let elements = likeElements(pattern)
        var t = text.startIndex, p = 0
        var star: (pattern: Int, text: Int)?
        while t < text.endIndex {
            if p < elements.count, elements[p] == .anyOne || elements[p] == .literal(text[t]) {
                t += 1
                p += 1
            } else if p < elements.count, elements[p] == .anyRun {
                star = (p, t)
                p += 1
            } else if let last = star {
                p = last.pattern + 1
                t = last.text + 1
                star = (last.pattern, last.text + 1)
            } else {
                return false
            }
        }
        while p < elements.count, elements[p] == .anyRun { p += 1 }
        return p == elements.count
    }

    /// What a compiled expression is cached by: the options apart from the pattern. (Keyed by
    /// their suffix written before the pattern, `MATCHES[cd] 'og'` and `MATCHES '[cd]og'` were
    /// one entry, and whichever ran first answered for both.)
    private struct ExpressionKey: Hashable {
        let pattern: String
        let caseInsensitive: Bool
        let diacriticInsensitive: Bool
    }

    private static let expressions = Locked<[ExpressionKey: NSRegularExpression]>([:])

    /// A compiled expression, cached by pattern and options; `nil` when the pattern is invalid
    /// (which matches nothing).
    private static func regularExpression(_ pattern: String, _ options: MatchOptions) -> NSRegularExpression? {
        let key = ExpressionKey(pattern: pattern, caseInsensitive: options.contains(.caseInsensitive),
                                diacriticInsensitive: options.contains(.diacriticInsensitive))
        if let cached = expressions.withLock({ $0[key] }) { return cached }
        var flags: NSRegularExpression.Options = []
        if options.contains(.caseInsensitive) { flags.insert(.caseInsensitive) }
        // Validate the pattern alone, then anchor it: MATCHES is about the whole text, and the
        // first match of `a|ab` in "ab" is only "a". A pattern that ends inside a quote (`\Q`
        // without `\E`) or a comment (`#` in `(?x)` mode) would take the anchor in: the quote,
        // or the comment's line, is ended first.
        let folded = fold(pattern, options.subtracting(.caseInsensitive))
        guard (try? NSRegularExpression(pattern: folded, options: flags)) != nil,
              let expression = ["", "\\E", "\n"].lazy.compactMap({
                  try? NSRegularExpression(pattern: "\\A(?:" + folded + $0 + ")\\z", options: flags)
              }).first
        else { return nil }
        expressions.withLock { cache in
            if cache.count > 256 { cache.removeAll() }
            cache[key] = expression
        }
        return expression
    }

    private static func matchesWhole(_ expression: NSRegularExpression, _ text: String) -> Bool {
        let range = NSRange(text.startIndex..., in: text)
        guard let match = expression.firstMatch(in: text, options: [.anchored], range: range) else { return false }
        return match.range == range
    }

    /// Whether an invalid pattern should be reported before running a query.
    package static func validate(_ op: TextOperator, _ options: MatchOptions, _ pattern: String) -> Bool {
        op != .matches || regularExpression(pattern, options) != nil
    }
}

extension TextMatch {
    /// The operator codes `cs_text` takes, as bound by the SQL generator: an operator's
    /// position in `TextOperator.allCases`.
    package static let operatorCodes: [Int: TextOperator] = Dictionary(uniqueKeysWithValues: TextOperator.allCases.enumerated().map { ($0.offset, $0.element) })

    package static func code(of op: TextOperator) -> Int { TextOperator.allCases.firstIndex(of: op)! }
}

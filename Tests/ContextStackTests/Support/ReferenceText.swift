import _ContextStackCore
import Foundation

/// An independent, deliberately simple statement of what the string operators mean, for the
/// differential tests to check both the SQL path and the in-memory path against. The library
/// runs one implementation (`TextMatch`) on both paths, so comparing them with each other
/// would prove nothing about the operators themselves.
///
/// The meaning, written out:
/// - Without options, text is compared exactly, scalar by scalar (binary, as the design says:
///   precomposed "é" and "e" + combining acute are different text).
/// - With `[c]` or `[d]`, text is first canonically decomposed (NFD), so precomposed and
///   combining forms are the same text, and composed again (NFC) once folded, so a letter
///   and its accents stay one scalar: under `[c]` alone "é" does not begin with "e".
/// - `[d]` drops combining marks (general categories Mn and Me) after decomposition.
/// - `[c]` compares caselessly: a scalar that Unicode says changes when case-folded is mapped
///   to lowercase, then uppercase, then lowercase again, which is Unicode's full case folding
///   for every script in the test data (ß and ẞ are "ss", final sigma is sigma, the ﬁ ligature
///   is "fi"); others stay (dotless ı is not i).
/// - CONTAINS, BEGINSWITH, ENDSWITH: a run of folded scalars.
/// - LIKE: `*` is any run of scalars, `?` exactly one, a backslash makes the scalar after it
///   literal (a backslash at the end is itself), anything else itself; the whole text.
/// - MATCHES: the whole text matches the regular expression, scalar by scalar (Swift's own
///   regex engine here, where the library uses ICU's). `[d]` folds both sides as above. With
///   `[c]` the expression matches case-insensitively, after each scalar of the text whose case
///   folding is a single scalar was folded (ICU's simple case folding: long ſ matches `s`, as
///   in CONTAINS[c]; ß stays one scalar and so matches `.`).
/// - A NULL value is unknown: the condition matches nothing, and neither does its negation.
enum ReferenceText {
    enum Operator: CaseIterable {
        case contains, beginsWith, endsWith, like, matches

        /// The library's operator of the same name.
        init(_ op: TextOperator) {
            switch op {
            case .contains: self = .contains
            case .beginsWith: self = .beginsWith
            case .endsWith: self = .endsWith
            case .like: self = .like
            case .matches: self = .matches
            }
        }
    }

    static func fold(_ text: String, caseInsensitive: Bool, diacriticInsensitive: Bool) -> [Unicode.Scalar] {
        guard caseInsensitive || diacriticInsensitive else { return Array(text.unicodeScalars) }
        var scalars: [Unicode.Scalar] = []
        for scalar in text.decomposedStringWithCanonicalMapping.unicodeScalars {
            let category = scalar.properties.generalCategory
            if diacriticInsensitive && (category == .nonspacingMark || category == .enclosingMark) { continue }
            scalars.append(contentsOf: caseInsensitive ? caseFolded(scalar) : [scalar])
        }
        var folded = ""
        folded.unicodeScalars.append(contentsOf: scalars)
        return Array(folded.precomposedStringWithCanonicalMapping.unicodeScalars)
    }

    /// The full case folding of one scalar (see the type's comment).
    static func caseFolded(_ scalar: Unicode.Scalar) -> [Unicode.Scalar] {
        guard scalar.properties.changesWhenCaseFolded else { return [scalar] }
        var folded: [Unicode.Scalar] = []
        for lower in scalar.properties.lowercaseMapping.unicodeScalars {
            for upper in lower.properties.uppercaseMapping.unicodeScalars {
                folded.append(contentsOf: upper.properties.lowercaseMapping.unicodeScalars)
            }
        }
        return folded
    }

    /// The operator's answer, or `nil` for a NULL value.
    static func evaluate(_ op: Operator, _ value: String?, _ pattern: String, caseInsensitive: Bool, diacriticInsensitive: Bool) -> Bool? {
        guard let value else { return nil }
        if op == .matches {
            return regexMatches(value, pattern, caseInsensitive: caseInsensitive, diacriticInsensitive: diacriticInsensitive)
        }
        let text = fold(value, caseInsensitive: caseInsensitive, diacriticInsensitive: diacriticInsensitive)
        let wanted = fold(pattern, caseInsensitive: caseInsensitive, diacriticInsensitive: diacriticInsensitive)
        switch op {
        case .contains:
            if wanted.isEmpty { return true }
            guard wanted.count <= text.count else { return false }
            return (0...(text.count - wanted.count)).contains { Array(text[$0..<($0 + wanted.count)]) == wanted }
        case .beginsWith:
            return text.starts(with: wanted)
        case .endsWith:
            return text.count >= wanted.count && Array(text.suffix(wanted.count)) == wanted
        case .like:
            return like(text[...], wanted[...])
        case .matches:
            return nil
        }
    }

    /// LIKE by plain recursion: a `*` either ends here or takes one more scalar.
    private static func like(_ text: ArraySlice<Unicode.Scalar>, _ pattern: ArraySlice<Unicode.Scalar>) -> Bool {
        guard let first = pattern.first else { return text.isEmpty }
        switch first {
        case "*":
            return like(text, pattern.dropFirst()) || (!text.isEmpty && like(text.dropFirst(), pattern))
        case "?":
            return !text.isEmpty && like(text.dropFirst(), pattern.dropFirst())
        case "\\" where pattern.count > 1:
            // A backslash makes the next scalar literal.
            let literal = pattern[pattern.index(after: pattern.startIndex)]
            return text.first == literal && like(text.dropFirst(), pattern.dropFirst(2))
        default:
            return text.first == first && like(text.dropFirst(), pattern.dropFirst())
        }
    }

    private static func regexMatches(_ value: String, _ pattern: String, caseInsensitive: Bool, diacriticInsensitive: Bool) -> Bool {
        // Diacritics are folded out of both sides first; case is the expression's option, with
        // each text scalar folded where its folding is one scalar (ICU's simple case folding).
        var text = fold(value, caseInsensitive: false, diacriticInsensitive: diacriticInsensitive)
        if caseInsensitive {
            text = text.map { scalar in
                let folded = caseFolded(scalar)
                return folded.count == 1 ? folded[0] : scalar
            }
        }
        let source = String(String.UnicodeScalarView(fold(pattern, caseInsensitive: false, diacriticInsensitive: diacriticInsensitive)))
        guard var regex = try? Regex(source) else { return false }
        regex = regex.matchingSemantics(.unicodeScalar)
        if caseInsensitive { regex = regex.ignoresCase() }
        return (try? regex.wholeMatch(in: String(String.UnicodeScalarView(text)))) != nil
    }
}

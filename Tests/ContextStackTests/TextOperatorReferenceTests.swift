@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// The string operators on both paths — SQL through the store, and the in-memory evaluation
/// used for pending changes and live results — against `ReferenceText`, an independent
/// statement of what they mean, on Unicode-, case- and NULL-heavy data.
@Suite struct TextOperatorReferenceTests {
    /// Values of `Person.location` (optional, so NULL takes part): precomposed and combining
    /// forms, case pairs whose folding is more than one scalar, ligatures, marks, wildcards
    /// as data, an embedded NUL.
    static let corpus: [String?] = [
        nil, "", "a", "A", "é", "e\u{301}", "É", "E", "e", "Monk", "monk", "MONK", "ß", "SS", "ss", "ẞ",
        "ς", "Σ", "σ", "ﬁ", "fi", "FI", "İ", "i", "ı", "I", "Å", "A\u{30A}", "Å", "ñ", "n\u{303}", "Ω", "Ω",
        "👍🏽", "👍", "a\u{0}b", "*", "?", "a*b", "ø", "ſ", "s", "straße", "STRASSE", "Ölçü", "olcu", "naïve café",
        "NAIVE CAFE", "ǅ", "ǆ", "Ǆ", "\\", "a\\b", "José", "jose", "Mönch", "한",
    ]

    /// LIKE patterns beyond the corpus values themselves.
    static let likePatterns = ["*", "?", "??", "*e*", "?onk", "M*", "*ss*", "st*e", "*\u{301}", "a?b", "*é*", "", "**", "?*?", "a\\*b", "\\?", "\\\\", "*\\*", "\\", "\\a*", "a\\", "jos?", "jose*"]
    static let regexPatterns = ["M.*", ".*", "[a-z]+", "é|e", ".?", "s+", "..", "[^a-z]*", "(mo|MO)nk"]

    static let allOptions: [MatchOptions] = [[], .caseInsensitive, .diacriticInsensitive, [.caseInsensitive, .diacriticInsensitive]]

    static func condition(_ op: ReferenceText.Operator, _ pattern: String, _ options: MatchOptions) -> Condition {
        let key = Key("location")
        switch op {
        case .contains: return key.contains(pattern, options: options)
        case .beginsWith: return key.beginsWith(pattern, options: options)
        case .endsWith: return key.endsWith(pattern, options: options)
        case .like: return key.like(pattern, options: options)
        case .matches: return key.matches(pattern, options: options)
        }
    }

    /// A pattern and its options are cached apart: `MATCHES[cd] 'og'` and `MATCHES '[cd]og'`
    /// are two expressions, whichever runs first (they were one cache entry, keyed by the
    /// options' suffix written before the pattern).
    @Test func aPatternThatBeginsLikeAnOptionSuffixIsItsOwnExpression() {
        #expect(TextMatch.evaluate(.matches, [.caseInsensitive, .diacriticInsensitive], "OG", "og"))
        #expect(TextMatch.evaluate(.matches, [], "dog", "[cd]og"))
        #expect(!TextMatch.evaluate(.matches, [], "OG", "[cd]og"))
        #expect(TextMatch.evaluate(.matches, [.caseInsensitive], "Og", "og"))
        #expect(TextMatch.evaluate(.matches, [], "cog", "[c]og") && !TextMatch.evaluate(.matches, [], "Og", "[c]og"))
    }

    @Test(arguments: ReferenceText.Operator.allCases)
    @MainActor func bothPathsAgreeWithTheReference(op: ReferenceText.Operator) async throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            for value in Self.corpus {
                let person = try update.create(Person.self)
                person.location = value
            }
            try update.commit()
        }
        try await store.stack.flush()
        let entity = store.stack.graph.entity(for: Person.self)
        let people = try world.fetchAll(Person.self)
        let rows = people.map { (id: $0.objectID, values: $0.values, location: $0.location) }
        let noRows: CompiledQuery.RowResolver = { _ in nil }
        let noMembers: CompiledQuery.MemberResolver = { _, _ in [] }

        var patterns = Self.corpus.compactMap { $0 }
        switch op {
        case .like: patterns += Self.likePatterns
        case .matches: patterns = Self.regexPatterns
        default: break
        }
        var mismatches = 0
        for pattern in patterns {
            for options in Self.allOptions {
                for negated in [false, true] {
                    let base = Self.condition(op, pattern, options)
                    let condition = negated ? !base : base
                    let reference = Set(rows.filter { row in
                        guard let answer = ReferenceText.evaluate(op, row.location, pattern,
                                                                  caseInsensitive: options.contains(.caseInsensitive),
                                                                  diacriticInsensitive: options.contains(.diacriticInsensitive)) else { return false }
                        return answer != negated
                    }.map(\.id))
                    let fromSQL = Set(try world.fetchIDs(Person.self, condition))
                    let query = try CompiledQuery(entity: entity, condition: condition, orderBy: nil)
                    let inMemory = Set(try rows.filter { try query.matches($0.id, $0.values, resolve: noRows, members: noMembers) }.map(\.id))
                    let describe = { (ids: Set<ObjectID>) in people.filter { ids.contains($0.objectID) }.map { $0.location.map { "\"\($0.unicodeScalars.map { $0.value < 128 ? String($0) : String(format: "U+%04X", $0.value) }.joined())\"" } ?? "nil" } }
                    #expect(fromSQL == reference, "SQL: \(condition) selects \(describe(fromSQL.subtracting(reference))) and misses \(describe(reference.subtracting(fromSQL)))")
                    #expect(inMemory == reference, "memory: \(condition) selects \(describe(inMemory.subtracting(reference))) and misses \(describe(reference.subtracting(inMemory)))")
                    if fromSQL != reference || inMemory != reference { mismatches += 1 }
                    if mismatches > 10 { return }
                }
            }
        }
    }
}

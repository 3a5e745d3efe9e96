@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackPostgres
import Foundation
import Testing

/// The string operators SQL answers without a call into Swift per row (Docs/Predicates.md,
/// "String operators"): BEGINSWITH a constant without options is the range of texts that
/// begin with the prefix (`name >= prefix AND name < successor`), which an index on the
/// column serves; CONTAINS a constant without options is SQLite's `instr`. Each must select
/// exactly what the in-memory evaluator selects, on texts at the edges.
struct TextOperatorSQLTests {
    @Test func theSuccessorOfAPrefixIsTheFirstTextPastEveryTextThatBeginsWithIt() {
        #expect(TextMatch.prefixSuccessor("a") == "b")
        #expect(TextMatch.prefixSuccessor("Mo")?.unicodeScalars.elementsEqual("Mp".unicodeScalars) == true)
        #expect(TextMatch.prefixSuccessor("a\u{10FFFF}")?.unicodeScalars.elementsEqual("b".unicodeScalars) == true)
        #expect(TextMatch.prefixSuccessor("\u{D7FF}")?.unicodeScalars.elementsEqual("\u{E000}".unicodeScalars) == true)
        #expect(TextMatch.prefixSuccessor("e\u{301}")?.unicodeScalars.elementsEqual("e\u{302}".unicodeScalars) == true)
        #expect(TextMatch.prefixSuccessor("") == nil)
        #expect(TextMatch.prefixSuccessor("\u{10FFFF}\u{10FFFF}") == nil)
    }

    /// A prefix that ends in ASCII raises its last byte in place (below U+007F) or goes through
    /// its scalars (U+007F, whose successor takes two bytes): both give the prefix with its last
    /// scalar raised by one, short (inline) and long texts alike.
    @Test func aPrefixEndingInASCIIHasTheSameSuccessorEitherWay() {
        for body in ["", "é", "name-", String(repeating: "long-prefix-", count: 4)] {
            for last in UInt32(0)...0x7F {
                let prefix = body + String(Unicode.Scalar(last)!)
                let expected = body + String(Unicode.Scalar(last + 1)!)
                #expect(TextMatch.prefixSuccessor(prefix)?.unicodeScalars.elementsEqual(expected.unicodeScalars) == true,
                        "successor of \(Array(prefix.utf8))")
            }
        }
    }

    /// Texts at the edges: a prefix's successor itself, U+10FFFF (no successor), the scalars
    /// around the surrogates, a decomposed accent (Swift's `==` would call it equal to the
    /// composed one; the store compares scalars), U+0000 where the store holds it.
    static let texts = ["", "a", "ab", "a\u{10FFFF}", "a\u{10FFFF}z", "b", "\u{D7FF}", "\u{D7FF}x", "\u{E000}",
                        "\u{10FFFF}", "\u{10FFFF}\u{10FFFF}", "M", "Mo", "Monk", "Mp", "é", "e\u{301}", "e\u{302}", "e", "a\u{0}b"]

    /// Stores a tag named after each text (those without U+0000 on PostgreSQL, which refuses
    /// it); the texts stored and their tags' IDs.
    static func storeTexts(_ kind: StoreKind, in world: ContextStack.Context) throws -> ([String], [ObjectID]) {
        let texts = kind == .postgres ? Self.texts.filter { !$0.unicodeScalars.contains("\u{0}") } : Self.texts
        let ids = try world.beginUpdateAndWait { update -> [ObjectID] in
            let tags = try texts.map { text in
                let tag = try update.create(Tag.self)
                tag.name = text
                return tag
            }
            try update.commit()
            return tags.map(\.objectID)
        }
        return (texts, ids)
    }

    @Test(arguments: StoreKind.available)
    func beginsWithSelectsWhatTheInMemoryEvaluatorSelects(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try ContextStack.Context(stack: store.stack)
        let (texts, ids) = try Self.storeTexts(kind, in: world)
        for prefix in texts + ["Mon", "é"] {
            let expected = Set(zip(texts, ids).filter { TextMatch.evaluate(.beginsWith, [], $0.0, prefix) }.map(\.1))
            let fetched = try world.beginUpdateAndWait { update in
                Set(try update.fetchAll(Tag.self, (%"name").beginsWith(prefix)).map(\.objectID))
            }
            #expect(fetched == expected, "BEGINSWITH \(prefix.unicodeScalars.map { String($0.value, radix: 16) })")
            let counted = try world.beginUpdateAndWait { update in try update.fetchCount(Tag.self, !(%"name").beginsWith(prefix)) }
            #expect(counted == texts.count - expected.count, "NOT BEGINSWITH \(prefix.unicodeScalars.map { String($0.value, radix: 16) })")
        }
    }

    /// Docs/Predicates.md, "String operators": `like("")` matches only the empty string, and
    /// `matches("")` throws `.unsupported`, as any expression that does not compile:
    /// `NSRegularExpression` refuses an empty pattern.
    @Test(arguments: StoreKind.available)
    func anEmptyPatternAndAnEmptyExpression(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try ContextStack.Context(stack: store.stack)
        let names = try world.beginUpdateAndWait { update -> (stored: [String], pending: [String]) in
            for name in ["", "a", "Monk"] { try update.create(Person.self).name = name }
            let pending = try update.fetchAll(Person.self, %"name"%.like("")).map(\.name)
            try update.commit()
            return (try update.fetchAll(Person.self, .where("name LIKE ''")).map(\.name), pending)
        }
        #expect(names.stored == [""] && names.pending == [""], "\(names)")
        func code(_ body: @escaping (Update) throws -> Void) -> QueryError.Code? {
            do { try world.beginUpdateAndWait(body); return nil } catch { return (error as? QueryError)?.code }
        }
        #expect(code { _ = try $0.fetchAll(Person.self, %"name"%.matches("")) } == .unsupported)
        #expect(code { _ = try $0.fetchAll(Person.self, .where("name MATCHES[c] ''")) } == .unsupported)
    }

    /// Docs/Predicates.md, "Errors": sorting by a key through a to-many relationship throws
    /// `.unknownKey`, on every store.
    @Test(arguments: StoreKind.available)
    func anOrderThroughAToManyIsAnUnknownKey(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let error = #expect(throws: QueryError.self) {
            try ContextStack.Context(stack: store.stack).beginUpdateAndWait { try $0.fetchAll(Person.self, orderBy: .ascending("pets.name")) }
        }
        #expect(error?.code == .unknownKey, "\(String(describing: error))")
    }

    /// The index on `Tag.name` serves a prefix query, and so does the unique constraint's
    /// index on `Person.email` (Docs/Predicates.md, "String operators"): the statement the
    /// fetch runs is a range on the column, and the database's plan for it reads the index.
    /// (The in-memory store runs the same SQLite statement as the file.)
    @Test(arguments: StoreKind.available.filter { $0 != .memory }, ["Tag.name", "Person.email"])
    func anIndexServesAPrefixQuery(kind: StoreKind, key: String) throws {
        let store = try TestStore(kind)
        let world = try ContextStack.Context(stack: store.stack)
        let counter = StatementCounter(store.stack)
        let (table, column) = (String(key.split(separator: ".")[0]), String(key.split(separator: ".")[1]))
        let statements = try counter.during {
            _ = try world.beginUpdateAndWait { update in
                table == "Tag" ? try update.fetchAll(Tag.self, (%"name").beginsWith("Mo")).count
                    : try update.fetchAll(Person.self, (%"email").beginsWith("Mo")).count
            }
        }
        store.stack.trace(nil)
        let sql = try #require(statements.first { $0.contains("FROM \"\(table)\"") })
        #expect(sql.contains("\"\(column)\" >= ?") && sql.contains("\"\(column)\" < ?"), "\(sql)")
        #expect(!sql.contains("cs_text") && !sql.contains("starts_with"), "\(sql)")
        let plan: String
        if let database = store.database {
            let db = try PostgresConnection(PostgresSettings(url: database.url))
            try db.execute("SET enable_seqscan = off")
            let literal = sql.replacingOccurrences(of: "?::text", with: "'Mo'::text").replacingOccurrences(of: "?", with: "NULL")
            plan = try db.allRows("EXPLAIN " + literal).map { "\($0)" }.joined(separator: "\n")
            #expect(plan.contains("Index"), "\(plan)")
        } else {
            plan = try store.rawConnection().rows("EXPLAIN QUERY PLAN " + sql).map { "\($0)" }.joined(separator: "\n")
            #expect(plan.contains("USING INDEX") || plan.contains("USING COVERING INDEX"), "\(plan)")
        }
    }

    /// CONTAINS a constant without options is SQLite's `instr` (PostgreSQL's `strpos`), with
    /// the evaluator's answers: NUL inside a text, an empty pattern, a decomposed accent.
    @Test(arguments: StoreKind.available)
    func containsIsTheDatabasesOwnSubstringSearch(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try ContextStack.Context(stack: store.stack)
        let (texts, ids) = try Self.storeTexts(kind, in: world)
        let counter = StatementCounter(store.stack)
        for pattern in texts + ["on", "\u{301}", "\u{0}b", "\u{10FFFF}z"] where kind != .postgres || !pattern.unicodeScalars.contains("\u{0}") {
            let expected = Set(zip(texts, ids).filter { TextMatch.evaluate(.contains, [], $0.0, pattern) }.map(\.1))
            let fetched = try world.beginUpdateAndWait { update in
                Set(try update.fetchAll(Tag.self, (%"name").contains(pattern)).map(\.objectID))
            }
            #expect(fetched == expected, "CONTAINS \(pattern.unicodeScalars.map { String($0.value, radix: 16) })")
        }
        store.stack.trace(nil)
        let sql = try #require(counter.all.first { $0.contains("FROM \"Tag\"") })
        #expect(sql.contains(kind == .postgres ? "strpos(" : "instr("), "\(sql)")
        #expect(!sql.contains("cs_text"), "\(sql)")
    }

    /// In `having:` a string operator may meet a grouped number or an aggregate's number,
    /// which is not text: it keeps `cs_text`'s answer (false), where a range or `instr` would
    /// compare or convert the number. (SQLite only: PostgreSQL refuses a string function on a
    /// number.)
    @Test(arguments: StoreKind.available.filter { $0 != .postgres })
    func havingKeepsTheEvaluatorsAnswerOnNumbers(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try ContextStack.Context(stack: store.stack)
        try Self.commitPeopleAged3And31And12(world)
        let (prefixed, contained) = try world.beginUpdateAndWait { update in
            (try update.query(Person.self, .select("age"), groupBy: %"age", having: (%"age").beginsWith("3")).count,
             try update.query(Person.self, .select("age") | .sum("age", alias: "total"), groupBy: %"age",
                              having: (%"total").contains("1")).count)
        }
        #expect(prefixed == 0)
        #expect(contained == 0)
    }

    /// Three people, aged 3, 31 and 12: numbers whose text begins with "3" or holds "1".
    static func commitPeopleAged3And31And12(_ world: ContextStack.Context) throws {
        try world.beginUpdateAndWait { update in
            for age in [3, 31, 12] {
                let person = try update.create(Person.self)
                (person.name, person.age) = ("P\(age)", age)
            }
            try update.commit()
        }
    }

    /// The same on PostgreSQL fails in the database (Docs/Queries.md, "Errors"): a string
    /// operator on a grouped number, or on an aggregate's number, throws `PostgresError`.
    @Test(.enabled(if: PostgresServer.isAvailable)) func havingWithAStringOperatorOnANumberFailsOnPostgreSQL() throws {
        let store = try TestStore(.postgres)
        let world = try ContextStack.Context(stack: store.stack)
        try Self.commitPeopleAged3And31And12(world)
        let grouped = #expect(throws: PostgresError.self) {
            try world.beginUpdateAndWait { update in
                _ = try update.query(Person.self, .select("age"), groupBy: %"age", having: (%"age").beginsWith("3"))
            }
        }
        let aggregated = #expect(throws: PostgresError.self) {
            try world.beginUpdateAndWait { update in
                _ = try update.query(Person.self, .select("age") | .sum("age", alias: "total"), groupBy: %"age", having: (%"total").contains("1"))
            }
        }
        #expect(grouped != nil && aggregated != nil)
    }
}

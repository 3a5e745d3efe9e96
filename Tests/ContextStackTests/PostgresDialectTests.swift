import _ContextStackCore
@testable import _ContextStackModel
@testable import _ContextStackPostgres
@testable import _ContextStackPostgresStore
import _ContextStackSQLite
import Foundation
import Testing

/// PostgreSQL's dialect means what SQLite's means: the string operators it translates agree
/// with the independent reference on Unicode-, case- and NULL-heavy text; null-safe equality,
/// NULL ordering, byte order of text and the aggregates agree with SQLite on the same rows.
@Suite(.enabled(if: PostgresServer.isAvailable, "needs a PostgreSQL server: see PostgresServer"))
struct PostgresDialectTests {
    let database: TestDatabase
    let postgres: PostgresConnection
    let sqlite: Connection

    /// The reference corpus, less the text PostgreSQL cannot hold at all (a NUL character).
    static let corpus = TextOperatorReferenceTests.corpus.filter { !($0?.unicodeScalars.contains("\u{0}") ?? false) }

    init() throws {
        database = try TestDatabase()
        postgres = try PostgresConnection(PostgresSettings(url: database.url))
        sqlite = try Connection(path: ":memory:")
        try postgres.execute("CREATE TABLE t (id bigint PRIMARY KEY, s text COLLATE \"C\", i bigint, d double precision)")
        try sqlite.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, s TEXT, i INTEGER, d REAL)")
        for (index, text) in Self.corpus.enumerated() {
            let number: Value = index % 5 == 0 ? .null : .integer(Int64((index * 7) % 11) - 5)
            let double: Value = index % 4 == 0 ? .null : .double(Double(index) / 3 - 4)
            let row: [Value] = [.integer(Int64(index)), text.map(Value.text) ?? .null, number, double]
            try postgres.run("INSERT INTO t VALUES (?, ?, ?, ?)", row)
            try sqlite.select("INSERT INTO t VALUES (?, ?, ?, ?)", row) { _ in }
        }
    }

    /// The ids of the rows where `condition(dialect)` holds, in the order the statement gives.
    func ids(_ connection: any QueryConnection, _ dialect: any SQLDialect, where condition: (any SQLDialect, inout [Value]) -> String,
             orderBy: String = "id") throws -> [Int64] {
        var arguments: [Value] = []
        let sql = "SELECT id FROM t WHERE \(condition(dialect, &arguments)) ORDER BY \(orderBy)"
        var result: [Int64] = []
        try connection.select(sql, arguments) { result.append($0.int64(0)) }
        return result
    }

    @Test(arguments: [TextOperator.contains, .beginsWith, .endsWith, .like])
    func stringOperatorsAgreeWithTheReference(op: TextOperator) throws {
        let reference = ReferenceText.Operator(op)
        var patterns = Self.corpus.compactMap { $0 } + ["%", "_", "\\", "a%", "_a", "\\%", "e\u{301}*"]
        if op == .like { patterns += TextOperatorReferenceTests.likePatterns }
        let dialect = PostgresDialect()
        #expect(dialect.canMatchText(op, [], constantPattern: true))
        for pattern in patterns {
            let matching = try ids(postgres, dialect) { dialect, arguments in
                dialect.textMatch({ _ in "s" }, op, [], pattern: .constant(pattern), arguments: &arguments)
            }
            let failing = try ids(postgres, dialect) { dialect, arguments in
                "NOT " + dialect.textMatch({ _ in "s" }, op, [], pattern: .constant(pattern), arguments: &arguments)
            }
            var expectedMatching: [Int64] = []
            var expectedFailing: [Int64] = []
            for (index, text) in Self.corpus.enumerated() {
                switch ReferenceText.evaluate(reference, text, pattern, caseInsensitive: false, diacriticInsensitive: false) {
                case true?: expectedMatching.append(Int64(index))
                case false?: expectedFailing.append(Int64(index))
                case nil: break  // NULL: neither the condition nor its negation holds
                }
            }
            #expect(matching == expectedMatching, "\(op.rawValue) \(String(reflecting: pattern))")
            #expect(failing == expectedFailing, "NOT \(op.rawValue) \(String(reflecting: pattern))")
        }
    }

    /// What PostgreSQL cannot write exactly becomes TRUE (FALSE under a negation) in the SQL,
    /// which then selects a superset that fetches filter in memory; what runs wholly in SQL
    /// (aggregates, batch operations) refuses it by name.
    @Test func whatItCannotTranslateExactlyIsLeftToMemory() throws {
        let dialect = PostgresDialect()
        #expect(!dialect.canMatchText(.matches, [], constantPattern: true))
        #expect(!dialect.canMatchText(.contains, .caseInsensitive, constantPattern: true))
        #expect(!dialect.canMatchText(.like, .diacriticInsensitive, constantPattern: true))
        let graph = try Model(Person.self, Pet.self).graph
        let entity = graph.entity(for: Person.self)
        func compiled(_ condition: Condition, _ dialect: any SQLDialect = PostgresDialect()) throws -> CompiledQuery {
            try CompiledQuery(entity: entity, condition: condition, orderBy: nil, dialect: dialect)
        }
        let relaxed = try compiled(Key("name").contains("monk", options: .caseInsensitive) && Key("age") > 3)
        #expect(relaxed.filtersInMemory)
        #expect(relaxed.fromWhere().text == #"FROM "Person" AS t0 WHERE (TRUE AND t0."age" > ?)"#)
        #expect(try compiled(!Key("name").contains("monk", options: .caseInsensitive)).fromWhere().text == #"FROM "Person" AS t0 WHERE (NOT FALSE)"#)
        let quantified = try compiled(.where("NONE pets.name MATCHES %@", "R.*"))
        #expect(quantified.filtersInMemory)
        #expect(quantified.fromWhere().text.contains("(NOT EXISTS (SELECT 1 FROM \"Pet\" AS q1_t0 WHERE q1_t0.\"owner\" = t0.\"Z_PK\" AND FALSE))"))
        let error = try #require(throws: QueryError.self) { try relaxed.requireSQLOnly(for: "an aggregate query") }
        #expect(error.code == .unsupported)
        #expect(error.message.contains("name CONTAINS[c]"))
        // SQLite evaluates every operator in SQL; operators without options need no memory.
        #expect(try !compiled(Key("name").contains("monk", options: .caseInsensitive), SQLiteDialect()).filtersInMemory)
        #expect(try !compiled(Key("name").contains("monk")).filtersInMemory)
    }

    @Test func equalityOrderAndNullsAgreeWithSQLite() throws {
        let dialects: [(any QueryConnection, any SQLDialect)] = [(sqlite, SQLiteDialect()), (postgres, PostgresDialect())]
        var results: [[[Int64]]] = []
        for (connection, dialect) in dialects {
            var forThisStore: [[Int64]] = []
            for value: Value in [.null, .integer(-2), .integer(3)] {
                forThisStore.append(try ids(connection, dialect) { dialect, arguments in
                    arguments.append(value)
                    return dialect.isSame("i", dialect.placeholder)
                })
                forThisStore.append(try ids(connection, dialect) { dialect, arguments in
                    arguments.append(value)
                    return dialect.isNotSame("i", dialect.placeholder)
                })
            }
            forThisStore.append(try ids(connection, dialect) { dialect, _ in dialect.isNotTrue("i > 0") })
            forThisStore.append(try ids(connection, dialect) { dialect, _ in dialect.trueCondition })
            forThisStore.append(try ids(connection, dialect) { dialect, _ in dialect.falseCondition })
            for column in ["s", "i", "d"] {
                for ascending in [true, false] {
                    forThisStore.append(try ids(connection, dialect, where: { dialect, _ in dialect.trueCondition },
                                                orderBy: dialect.orderTerm(column, ascending: ascending) + ", id"))
                }
            }
            results.append(forThisStore)
        }
        #expect(results[0] == results[1])
        #expect(results[0].count == 15)
        #expect(results[0].allSatisfy { !$0.isEmpty } == false, "falseCondition selects nothing")
        #expect(results[0].filter(\.isEmpty).count == 1, "every other statement selects rows")
    }

    @Test func aggregatesAgreeWithSQLite() throws {
        for function: Select.Function in [.average, .sum, .stdDev, .min, .max, .median, .count] {
            for (column, condition) in [("i", "TRUE"), ("d", "TRUE"), ("i", "id < 0"), ("d", "id = 1")] {
                var values: [Value] = []
                for (connection, dialect) in [(sqlite as any QueryConnection, SQLiteDialect() as any SQLDialect), (postgres, PostgresDialect())] {
                    let sqliteCondition = condition == "TRUE" ? dialect.trueCondition : condition
                    values.append(try connection.scalar("SELECT \(dialect.aggregate(function, of: column, kind: column == "i" ? .int : .double)) FROM t WHERE \(sqliteCondition)"))
                }
                let label = "\(function) of \(column) where \(condition): SQLite \(values[0]), PostgreSQL \(values[1])"
                switch (values[0], values[1]) {
                case (.null, .null): break
                case let (a, b) where a.doubleValue != nil && b.doubleValue != nil:
                    #expect(abs(a.doubleValue! - b.doubleValue!) <= 1e-9 * max(1, abs(a.doubleValue!)), "\(label)")
                default:
                    Issue.record("\(label)")
                }
            }
        }
    }

    @Test func textMinAndMaxGoByBytes() throws {
        var values: [Value] = []
        for (connection, dialect) in [(sqlite as any QueryConnection, SQLiteDialect() as any SQLDialect), (postgres, PostgresDialect())] {
            values.append(try connection.scalar("SELECT \(dialect.aggregate(.min, of: "s", kind: .string)) || '|' || \(dialect.aggregate(.max, of: "s", kind: .string)) FROM t"))
        }
        #expect(values[0] == values[1], "\(values)")
    }

    @Test func likePatternsEscapePostgresWildcards() {
        #expect(PostgresDialect.likePattern("a*b?c") == "a%b_c")
        #expect(PostgresDialect.likePattern("100%_\\") == "100\\%\\_\\\\")
        #expect(PostgresDialect.likePattern("") == "")
    }
}

/// The readers above the store seam are the same on every store: `RowReader` decodes rows,
/// follows to-one joins and reads to-many members through a PostgreSQL connection, with SQL
/// compiled in PostgreSQL's dialect, windows included.
@Suite(.enabled(if: PostgresServer.isAvailable, "needs a PostgreSQL server: see PostgresServer"))
struct PostgresReadingTests {
    @Test func theRowReaderRunsOnPostgreSQLUnchanged() throws {
        let tables = try PostgresTables([Person.self, Pet.self])
        let (connection, graph) = (tables.connection, tables.graph)
        let people: [(Int64, String, Int64, String?)] = [(1, "Monk", 61, "Sea"), (2, "Knight", 35, nil), (3, "Farmer", 40, "Field"),
                                                         (4, "Warrior", 28, "Sea"), (5, "Zoë", 35, nil)]
        for (key, name, age, location) in people {
            try connection.run("INSERT INTO \"Person\" (\"Z_PK\", name, age, location) VALUES (?, ?, ?, ?)",
                               [.integer(key), .text(name), .integer(age), location.map(Value.text) ?? .null])
        }
        try connection.run("UPDATE \"Person\" SET friend = 1 WHERE \"Z_PK\" IN (2, 3)")
        try connection.run("INSERT INTO \"Pet\" (\"Z_PK\", name, age, owner) VALUES (1, 'Rex', 3, 1), (2, 'Tom', 5, 1), (3, 'Kit', 1, 4)")

        let person = graph.entity(for: Person.self)
        var reader = RowReader(session: ReadSession(graph: graph, connection: connection, overlay: Overlay()), context: nil)
        func names(_ condition: Condition?, _ orderBy: OrderBy?, limit: Int?, offset: Int) throws -> [String] {
            let query = try CompiledQuery(entity: person, condition: condition, orderBy: orderBy, dialect: PostgresDialect())
            var sql = query.fromWhere()
            sql.text = "SELECT \(reader.selectColumns(person.table, alias: "t0")) \(sql.text) \(query.orderBySQL()) "
                + query.dialect.window(limit: limit, offset: offset, arguments: &sql.arguments)
            let slot = person.properties.firstIndex { $0.name == "name" }!
            return try reader.rows(sql, table: person.table).map { $0.row.values[slot].stringValue ?? "?" }
        }
        #expect(try names(Key("age") > 30, .ascending("name"), limit: nil, offset: 0) == ["Farmer", "Knight", "Monk", "Zoë"])
        #expect(try names(Key("age") > 30, .ascending("name"), limit: 2, offset: 1) == ["Knight", "Monk"])
        #expect(try names(nil, .ascending("location") | .descending("age"), limit: nil, offset: 2) == ["Farmer", "Monk", "Warrior"],
                "NULL locations first, then by bytes; an offset without a limit")
        #expect(try names(Key("friend.name") == "Monk" && Key("location") == nil, nil, limit: nil, offset: 0) == ["Knight"])
        #expect(try names(.where("ANY pets.age >= 3"), .descending("name"), limit: nil, offset: 0) == ["Monk"])
        #expect(try names(.where("pets.@count == 0 AND name BEGINSWITH 'K'"), nil, limit: nil, offset: 0) == ["Knight"])

        let monk = ObjectID(rootEntity: person.rootDescription, primaryKey: 1)
        let row = try #require(try reader.row(monk))
        #expect(row.values[person.properties.firstIndex { $0.name == "age" }!] == .integer(61))
        let pets = person.properties.first { $0.name == "pets" }!
        #expect(try reader.members(of: monk, pets).map(\.primaryKey).sorted() == [1, 2])
    }
}

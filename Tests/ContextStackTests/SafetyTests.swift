@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// Hostile keys are rejected before any SQL is built; hostile values are bound, so they match
/// literally and change nothing.
@Suite struct SafetyTests {
    static let hostileKeys = [
        "name\"; DROP TABLE \"Person\"; --", "name'", "name; DELETE FROM Person", "name --", "name\0age",
        "\0", "", ".", "name.", ".name", "friend..age", "Z_PK", "Z_ENT", "sqlite_master", "name) OR (1=1",
        "pets.@count.x", "@count", "friend.@count", "名前",
    ]

    static let hostileValues = [
        "'; DROP TABLE Person; --", "x\" OR \"1\"=\"1", "Robert'); DELETE FROM Person;--", "semi;colon", "-- comment",
        "nul\0inside", "\0", "%", "_", "*", "?", "\\", String(repeating: "v", count: 1 << 20), "é\u{301}", "",
    ]

    @Test(arguments: StoreKind.available) @MainActor
    func hostileKeysAreRejectedWithQueryErrors(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait(Fixtures.people)
        let huge = String(repeating: "k", count: 1 << 20)
        #expect(throws: QueryError.self) { _ = try world.fetchAll(Person.self, Key(huge) == "x") }
        #expect(throws: QueryError.self) { _ = try world.fetchAll(Person.self, .where("%K == 1", huge)) }
        for key in Self.hostileKeys {
            #expect(throws: QueryError.self, "\(key.prefix(40))") { _ = try world.fetchAll(Person.self, Key(key) == "x") }
            #expect(throws: QueryError.self) { _ = try world.fetchAll(Person.self, orderBy: .ascending(key)) }
            #expect(throws: QueryError.self) { _ = try world.fetchCount(Person.self, Key(key).contains("x")) }
            #expect(throws: QueryError.self) { _ = try world.query(Person.self, .average(key)) }
            #expect(throws: QueryError.self) { _ = try world.query(Person.self, .select("name"), groupBy: Key(key)) }
            #expect(throws: QueryError.self) { _ = try world.fetchAll(Person.self, options: .prefetch([key])) }
            #expect(throws: QueryError.self) { _ = try world.fetchAll(Person.self, options: .propertiesOnly([key])) }
            #expect(throws: QueryError.self) { _ = try world.fetchAll(Person.self, .where("%K == 1", key)) }
        }
        // Nothing was harmed.
        #expect(try world.fetchCount(Person.self) == 6)
    }

    @Test(arguments: StoreKind.available) @MainActor
    func hostileValuesAreStoredAndMatchedLiterally(kind: StoreKind) throws {
        let store = try TestStore(kind)
        // PostgreSQL cannot hold U+0000 in text: such values are refused whole there (the
        // PostgreSQL client's tests check the error), so they are left out on it.
        let hostileValues = kind == .postgres ? Self.hostileValues.filter { !$0.contains("\0") } : Self.hostileValues
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            for value in hostileValues {
                let person = try update.create(Person.self)
                person.name = value
                person.location = value
            }
            try update.commit()
        }
        try store.stack.flushAndWait()
        let reopened = kind == .memory ? store.stack : try store.reopen()
        let other = try MainContext(stack: reopened)
        for value in hostileValues {
            let found = try other.fetchAll(Person.self, %"name" == value)
            #expect(found.count == 1 && found.first?.location == value, "\(value.prefix(40).debugDescription)")
            #expect(try other.fetchCount(Person.self, .where("location == %@", value)) == 1)
            // Wildcards in a value given to contains are characters, not patterns.
            guard value.utf8.count < 1000 else { continue }
            let containing = try other.fetchAll(Person.self, %"name"%.contains(value)).map(\.name)
            #expect(containing.allSatisfy { $0.contains(value) || value.isEmpty })
        }
        #expect(try other.fetchCount(Person.self) == hostileValues.count)
        // The NUL byte is kept: the two strings that differ after it are two people.
        #expect(try other.fetchCount(Person.self, %"name"%.beginsWith("nul")) == (kind == .postgres ? 0 : 1))
        #expect(try other.queryValue(Person.self, .count("name")).int64Value == Int64(hostileValues.count))
    }

    @Test @MainActor func representativeQueriesProduceTheirSQL() throws {
        let store = try TestStore(.memory)
        let entity = store.stack.graph.entity(for: Person.self)
        func fetchSQL(_ condition: Condition?, _ order: OrderBy? = nil) throws -> String {
            let query = try CompiledQuery(entity: entity, condition: condition, orderBy: order)
            return "\(query.fromWhere().text) \(query.orderBySQL())"
        }
        #expect(try fetchSQL(%"age" > 18 && %"friend.name" == "Farmer", .descending("name")) ==
                #"FROM "Person" AS t0 LEFT JOIN "Person" AS t1 ON t1."Z_PK" = t0."friend" WHERE (t0."age" > ? AND t1."name" IS ?) ORDER BY t0."name" DESC, t0."Z_PK" ASC"#)
        #expect(try fetchSQL(%"pets.@count" > 1) ==
                #"FROM "Person" AS t0 WHERE (SELECT count(*) FROM "Pet" AS t0_n WHERE t0_n."owner" = t0."Z_PK") > ? ORDER BY t0."Z_PK" ASC"#)
        func querySQL(_ select: Select, _ condition: Condition? = nil, orderBy: OrderBy? = nil, groupBy: KeyList? = nil,
                      having: Condition? = nil, options: FetchOptions = FetchOptions()) throws -> String {
            try AggregateQuery(entity: entity, select: select, condition: condition, orderBy: orderBy, groupBy: groupBy,
                               having: having, options: options).sql.text
        }
        #expect(try querySQL(.select("location") | .average("age", alias: "avgAge"), %"age" > 10, orderBy: .descending("avgAge"),
                             groupBy: (%"location").keyList, having: %"avgAge" > 20, options: .limit(5)) ==
                #"SELECT t0."location" AS "location", avg(t0."age") AS "avgAge" FROM "Person" AS t0 WHERE t0."age" > ? GROUP BY t0."location" HAVING avg(t0."age") > ? ORDER BY "avgAge" DESC LIMIT ? OFFSET ?"#)
        #expect(try querySQL(.median("age", alias: "med") | .stdDev("age", alias: "sd")) ==
                #"SELECT cs_median(t0."age") AS "med", cs_stddev(t0."age") AS "sd" FROM "Person" AS t0"#)
    }

    @Test @MainActor func queriesNameOnlyWhatEachRowHas() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait(Fixtures.people)
        // Having filters groups: without grouping or an aggregate it means nothing.
        #expect { _ = try world.query(Person.self, .select("name"), having: %"name" == "Monk") } throws: {
            ($0 as? QueryError)?.code == .unsupported
        }
        // An aggregated key has no one value per group: order by its alias instead.
        #expect { _ = try world.query(Person.self, .select("location") | .average("age", alias: "avg"), orderBy: .ascending("age"), groupBy: %"location") } throws: {
            ($0 as? QueryError)?.code == .unknownKey
        }
        #expect(try world.query(Person.self, .select("location") | .average("age", alias: "avg"), orderBy: .ascending("location"), groupBy: %"location").count == 4)
        // A key path that is not persisted says so when the sort runs.
        #expect { _ = try world.fetchAll(Person.self, orderBy: .ascending(\Person.scratch)) } throws: {
            ($0 as? QueryError)?.message.contains("persisted property") == true
        }
    }
}

@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import _ContextStackPostgres
import Foundation
import Testing

@Suite struct PredicateTests {
    @MainActor func names(_ world: MainContext, _ condition: Condition?, orderBy: OrderBy = .ascending("name"),
                          options: FetchOptions = FetchOptions()) throws -> [String] {
        try world.fetchAll(Person.self, condition, orderBy: orderBy, options: options).map(\.name)
    }

    @Test(arguments: Setup.all) @MainActor
    func comparisonsWithValuesNilAndKeys(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write(Fixtures.people)
        #expect(try names(world, %"name" == "Monk") == ["Monk"])  // binary: "monk" differs
        #expect(try names(world, "name"% != "Monk") == ["Farmer", "Knight", "Warrior", "monk", "Élise"])
        #expect(try names(world, %"age" > 35) == ["Monk", "Élise"])
        #expect(try names(world, %"age" >= 35) == ["Monk", "Warrior", "Élise"])
        #expect(try names(world, %"age" < 18) == ["monk"])
        #expect(try names(world, %"age" <= 18) == ["Knight", "monk"])
        #expect(try names(world, %"location" == nil) == ["Knight", "Élise"])
        #expect(try names(world, %"location" == nil as String?) == ["Knight", "Élise"])
        #expect(try names(world, %"location" != nil) == ["Farmer", "Monk", "Warrior", "monk"])
        // != x matches NULL; ordering never matches NULL, nor does its negation.
        #expect(try names(world, %"location" != "Taipei") == ["Knight", "Monk", "monk", "Élise"])
        #expect(try names(world, %"location" > "A") == ["Farmer", "Monk", "Warrior"])
        #expect(try names(world, !(%"location" > "A")) == ["monk"])
        #expect(try names(world, %"name" == %"location") == [])
        #expect(try names(world, %"name" > %"location") == ["Monk", "Warrior", "monk"])
        #expect(try names(world, %"age" > 30 && %"location" == "Taipei") == ["Warrior"])
        #expect(try names(world, %"age" < 15 || %"location" == "Kyoto") == ["Monk", "monk"])
        #expect(try names(world, !(%"age" < 15 || %"location" == "Kyoto")) == ["Farmer", "Knight", "Warrior", "Élise"])
        #expect(try names(world, %"age" > 20.5) == ["Farmer", "Monk", "Warrior", "Élise"])
        #expect(try names(world, .all) == ["Farmer", "Knight", "Monk", "Warrior", "monk", "Élise"])
        #expect(try names(world, Condition.none) == [])
    }

    @Test(arguments: Setup.all) @MainActor
    func keyPathsThroughToOneRelationships(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write(Fixtures.people)
        #expect(try names(world, %"friend.age" > 25) == ["Knight", "monk"])
        #expect(try names(world, %"friend.name" == "Knight") == ["Warrior"])
        #expect(try names(world, %"friend.friend.name" == "Farmer") == ["Warrior"])
        #expect(try names(world, %"friend" == nil) == ["Farmer", "Monk", "Élise"])
        #expect(try names(world, %"friend.location" == nil) == ["Farmer", "Monk", "Warrior", "Élise"])
        let farmer = try #require(try world.fetch(Person.self, %"name" == "Farmer"))
        #expect(try names(world, %"friend" == farmer) == ["Knight"])
        #expect(try names(world, %"friend" == farmer.objectID) == ["Knight"])
        #expect(try names(world, %"friend" != farmer) == ["Farmer", "Monk", "Warrior", "monk", "Élise"])
    }

    @Test(arguments: Setup.all) @MainActor
    func orderLimitAndOffset(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write(Fixtures.people)
        #expect(try names(world, nil, orderBy: .descending("age")) == ["Monk", "Élise", "Warrior", "Farmer", "Knight", "monk"])
        // NULL first ascending, last descending; ties in primary-key order.
        #expect(try names(world, nil, orderBy: .ascending("location") | .descending("age"))
                == ["Élise", "Knight", "monk", "Monk", "Warrior", "Farmer"])
        #expect(try names(world, nil, orderBy: .descending("location")) == ["Farmer", "Warrior", "Monk", "monk", "Knight", "Élise"])
        #expect(try names(world, nil, orderBy: .ascending("age"), options: .limit(2)) == ["monk", "Knight"])
        #expect(try names(world, nil, orderBy: .ascending("age"), options: .limit(2) | .offset(3)) == ["Warrior", "Élise"])
        #expect(try names(world, nil, orderBy: .ascending("age"), options: .offset(4)) == ["Élise", "Monk"])
        #expect(try names(world, nil, orderBy: .ascending("friend.name") | .ascending("name")) ==
                ["Farmer", "Monk", "Élise", "Knight", "Warrior", "monk"])
        #expect(try world.fetchIDs(Person.self, orderBy: .ascending("age"), options: .limit(1)).count == 1)
    }

    @Test(arguments: Setup.all) @MainActor
    func unknownKeysAndWrongTypesThrowNamingKeyAndEntity(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        func expectError(_ condition: Condition, _ code: QueryError.Code, key: String, sourceLocation: SourceLocation = #_sourceLocation) {
            #expect(sourceLocation: sourceLocation) {
                _ = try world.fetchAll(Person.self, condition)
            } throws: { error in
                let error = try #require(error as? QueryError)
                return error.code == code && error.key == key && error.entity == "Person" && error.message.contains(key)
            }
        }
        expectError(%"nmae" == "x", .unknownKey, key: "nmae")
        expectError(%"friend.nmae" == "x", .unknownKey, key: "friend.nmae")
        expectError(%"name.length" == 1, .unknownKey, key: "name.length")
        expectError(%"age" == "x", .typeMismatch, key: "age")
        expectError(%"name" > 3, .typeMismatch, key: "name")
        expectError(%"friend" == "x", .typeMismatch, key: "friend")
        expectError(%"name" == %"age", .typeMismatch, key: "name")
        expectError(%"pets" == nil, .unsupported, key: "pets")
        // A to-many relationship holds objects: compared with a value it is refused as such
        // (it was a type mismatch of "Pet.SELF").
        expectError(%"pets" == "Rex", .unsupported, key: "pets")
        expectError(%"pets" > 3, .unsupported, key: "pets")
        expectError(%"pets"%.in([1]), .unsupported, key: "pets")
        expectError(%"age" > nil as Int?, .unsupported, key: "age")
        // BETWEEN orders too: a bound of nil or NaN is refused as `> nil` is (SQL's
        // `BETWEEN NULL AND 30` matched the people over 30 under a NOT).
        expectError(!(%"age"%.between(nil as Int?, 30)), .unsupported, key: "age")
        expectError(%"age"%.between(0.0, Double.nan), .unsupported, key: "age")
        expectError(!.where("age BETWEEN {nil, 30}"), .unsupported, key: "age")
        #expect(throws: QueryError.self) { _ = try world.fetchAll(Person.self, orderBy: .ascending("nope")) }
        // Decimals are stored as text: == and != only, no order (Docs/GettingStarted.md).
        for refused: () throws -> Void in [
            { _ = try world.fetchAll(Sample.self, orderBy: .ascending("decimal")) },
            { _ = try world.fetchAll(Sample.self, %"decimal" > Decimal(1)) },
            { _ = try world.fetchAll(Sample.self, %"optionalDecimal" <= Decimal(string: "2.5")!) },
            { _ = try world.fetchAll(Sample.self, %"decimal"%.between(Decimal(1), Decimal(2))) },
        ] {
            #expect { try refused() } throws: { error in
                guard let error = error as? QueryError else { return false }
                return error.code == .unsupported && error.message.contains("decimal")
            }
        }
        // Ordering a decimal against another key compares two different kinds of text: a type
        // mismatch (Docs/Predicates.md).
        #expect { _ = try world.fetchAll(Sample.self, %"decimal" < %"optionalDecimal") } throws: { ($0 as? QueryError)?.code == .typeMismatch }
        // A string operator on a key that is not text, and a quantifier on a key that is not
        // a to-many relationship (Docs/Predicates.md, "Errors").
        for (condition, code) in [((%"age").beginsWith("1"), QueryError.Code.typeMismatch), (%"name"%.any == "x", .unsupported)] {
            #expect { _ = try world.fetchAll(Person.self, condition) } throws: { ($0 as? QueryError)?.code == code }
        }
        _ = try world.fetchAll(Sample.self, %"decimal" == Decimal(1))
        _ = try world.fetchAll(Sample.self, %"decimal" != Decimal(1))
    }

    @Test func sqlUsesBoundValuesAndLeftJoins() throws {
        let model = try Model(Person.self, Pet.self)
        let person = try #require(model.graph.entity(named: "Person"))
        let query = try CompiledQuery(entity: person, condition: %"name" == "Robert'); DROP TABLE Person;--" && %"friend.age" > 30
                                      || %"location" == nil, orderBy: .descending("age"))
        let sql = query.fromWhere()
        #expect(sql.text == #"FROM "Person" AS t0 LEFT JOIN "Person" AS t1 ON t1."Z_PK" = t0."friend" WHERE ((t0."name" IS ? AND t1."age" > ?) OR t0."location" IS NULL)"#)
        #expect(sql.arguments == [.text("Robert'); DROP TABLE Person;--"), .integer(30)])
        #expect(query.orderBySQL() == #"ORDER BY t0."age" DESC, t0."Z_PK" ASC"#)
        let notQuery = try CompiledQuery(entity: person, condition: !(%"age" != 3), orderBy: nil)
        #expect(notQuery.fromWhere().text == #"FROM "Person" AS t0 WHERE (NOT t0."age" IS NOT ?)"#)
    }

    @Test(arguments: Setup.all) @MainActor
    func hostileValuesMatchLiterally(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        // PostgreSQL cannot hold U+0000 in text: there it is refused whole (Docs/Postgres.md).
        let nul = "a\u{0}b"
        let hostile = ["'; DROP TABLE Person; --", "\"quoted\"", String(repeating: "x", count: 1_000_000)] + (setup.kind == .postgres ? [] : [nul])
        if setup.kind == .postgres {
            await #expect {
                try await harness.write { update in
                    try update.create(Person.self).name = nul
                    try update.commit()
                }
            } throws: { ($0 as? PostgresError)?.code == .characterNotInRepertoire }
            #expect(try world.fetchCount(Person.self) == 0)
        }
        try await harness.write { update in
            for name in hostile { try update.create(Person.self).name = name }
            try update.commit()
        }
        for name in hostile {
            #expect(try world.fetchAll(Person.self, %"name" == name).map(\.name) == [name])
        }
        #expect(try world.fetchCount(Person.self) == hostile.count)
    }
}

/// The statements fetches run, as `Docs/Predicates.md` shows them.
@Suite struct PredicateSQLTests {
    @Test @MainActor func fetchesRunTheDocumentedSQL() async throws {
        let (store, world, select) = try await peopleForDocumentedSQL()
        let friends = try expectSQL(store.stack, [
            "SELECT \(select) FROM \"Person\" AS t0 LEFT JOIN \"Person\" AS t1 ON t1.\"Z_PK\" = t0.\"friend\" WHERE t1.\"age\" > ?",
        ]) {
            try world.fetchAll(Person.self, %"friend.age" > 20)
        }
        #expect(friends.map(\.name) == ["Knight", "monk"])
        let count = try expectSQL(store.stack, [
            "SELECT count(*) FROM \"Person\" AS t0 WHERE cs_text(?, ?, t0.\"name\", ?)",
        ]) {
            try world.fetchCount(Person.self, %"name"%.contains("onk", options: .caseInsensitive))
        }
        #expect(count == 2)
    }
}

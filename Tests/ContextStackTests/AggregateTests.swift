@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
@testable import _ContextStackPostgres
import Foundation
import Testing

@Suite struct AggregateTests {
    /// Docs/Queries.md, "What a query sees": a query in an update does not see the update's
    /// pending changes, where `fetchCount` does; a main context that does not merge queries the
    /// store as it is now, where its `fetchCount` reads its pinned view, until `reset()`.
    @Test(arguments: StoreKind.available.filter { $0 != .memory }) @MainActor
    func aQueryReadsTheStoreNotPendingChangesNorAPinnedView(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        let quiet = try MainContext(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        #expect(try quiet.fetchCount(Person.self) == 0)
        try await store.stack.flush()
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Ann"
            #expect(try update.fetchCount(Person.self) == 1)
            #expect(try update.queryValue(Person.self, .count("name")) == .integer(0))
            try update.commit()
        }
        try await store.stack.flush()
        #expect(try quiet.fetchCount(Person.self) == 0)
        #expect(try quiet.queryValue(Person.self, .count("name")) == .integer(1))
        quiet.reset()
        #expect(try quiet.fetchCount(Person.self) == 1)
    }

    /// Docs/Queries.md, "Aggregates": SQLite's `total` adds in doubles (before SQLite 3.43,
    /// which compensates), PostgreSQL adds whole numbers exactly and rounds once: past 2⁵³ the
    /// two may differ in the last bits. On SQLite the sum is what this SQLite's `total` gives.
    @Test(arguments: StoreKind.available) @MainActor
    func aSumPastTwoToTheFiftyThirdIsRoundedAsEachDatabaseAdds(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            for age in [1 << 53, 1, 1] { try update.create(Person.self).age = age }
            try update.commit()
        }
        try await store.stack.flush()
        let sqlite = try Connection(path: ":memory:").scalar("SELECT total(age) FROM (SELECT 9007199254740992 AS age UNION ALL SELECT 1 UNION ALL SELECT 1)")
        #expect(try world.queryValue(Person.self, .sum("age")) == (kind == .postgres ? .double(9007199254740994) : sqlite))
    }

    @Test(arguments: Setup.all) @MainActor
    func aggregatesGroupingHavingAndOrder(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write(Fixtures.agedPeople)
        #expect(try world.queryValue(Person.self, .average("age")).doubleValue == 27.5)
        #expect(try world.queryValue(Person.self, .sum("age")).doubleValue == 165)
        #expect(try world.queryValue(Person.self, .min("age")) == .integer(5))
        #expect(try world.queryValue(Person.self, .max("age")) == .integer(60))
        #expect(try world.queryValue(Person.self, .median("age")).doubleValue == 25)
        #expect(try world.queryValue(Person.self, .count("location")) == .integer(5))
        let deviation = try #require(try world.queryValue(Person.self, .stdDev("age")).doubleValue)
        #expect(abs(deviation - (2087.5 / 6).squareRoot()) < 1e-9)  // population: the sum of squared deviations over n
        #expect(try world.queryValue(Person.self, .average("age"), %"age" > 100) == .null)
        #expect(try world.queryValue(Person.self, .median("age"), %"age" > 100) == .null)

        let rows = try world.query(Person.self, .select("location") | .average("age", alias: "avgAge") | .count("name", alias: "n"),
                                   %"age" > 5, orderBy: .descending("avgAge"), groupBy: %"location", having: %"n" >= 1)
        #expect(rows.map { $0["location"] } == [.text("Kyoto"), .null, .text("Taipei")])
        #expect(rows.map { $0["avgAge"]?.doubleValue } == [50, 30, 15])
        #expect(rows.map { $0["n"] } == [.integer(2), .integer(1), .integer(2)])
        #expect(rows.first?["nothing"] == nil)
        // Docs/Queries.md, "Rows and values": what `print(row)` shows.
        #expect(rows.map { "\($0)" } == [#"[location: "Kyoto", avgAge: 50.0, n: 2]"#, "[location: NULL, avgAge: 30.0, n: 1]",
                                          #"[location: "Taipei", avgAge: 15.0, n: 2]"#])

        let having = try world.query(Person.self, .select("location") | .average("age", alias: "avgAge"),
                                     groupBy: %"location", having: %"avgAge" > 20)
        #expect(Set(having.compactMap { $0["location"]?.stringValue }) == ["Kyoto"])
        #expect(having.count == 2)  // Kyoto (50) and the NULL location (30)

        let paths = try world.query(Person.self, .select("name", "friend.name") | .sum("friend.age", alias: "s"),
                                    %"friend" != nil, orderBy: .ascending("name"), groupBy: %"name" | %"friend.name")
        #expect(paths.map { $0["friend.name"] } == [.text("c"), .text("c")])
        #expect(paths.map { $0["s"]?.doubleValue } == [60, 60])

        let distinct = try world.query(Person.self, .select("location"), orderBy: .ascending("location"), options: .distinct)
        #expect(distinct.map { $0["location"] } == [.null, .text("Kyoto"), .text("Taipei")])
        let window = try world.query(Person.self, .select("name"), orderBy: .ascending("name"), options: .limit(2) | .offset(1))
        #expect(window.map { $0["name"] } == [.text("b"), .text("c")])
    }

    /// Docs/Queries.md, "Which keys", on every store: `.count` of a to-one counts the objects
    /// that have one; `Date`s and `Bool`s average as numbers (seconds since 1970, 1 and 0); a
    /// to-one elsewhere, or a text where a number is needed, throws `.typeMismatch`; a
    /// `Decimal` in any aggregate but `.count`, or a to-many, throws `.unsupported`; and
    /// `queryValue` of a plain key over no rows is `.null`.
    @Test(arguments: StoreKind.available) @MainActor func whichKeysEachAggregateTakes(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        #expect(try world.queryValue(Person.self, .select("name")) == .null)
        try world.beginUpdateAndWait { update in
            let ann = try update.create(Person.self)
            let bob = try update.create(Person.self)
            let cy = try update.create(Person.self)
            (ann.name, bob.name, cy.name) = ("Ann", "Bob", "Cy")
            (ann.friend, cy.friend) = (bob, ann)
            for (seconds, flag) in [(0.0, true), (100.0, false), (200.0, true), (300.0, true)] {
                let sample = try update.create(Sample.self)
                (sample.date, sample.flag, sample.decimal) = (Date(timeIntervalSince1970: seconds), flag, Decimal(seconds))
            }
            try update.commit()
        }
        try store.stack.flushAndWait()
        #expect(try world.queryValue(Person.self, .count("friend")) == .integer(2))
        #expect(try world.queryValue(Sample.self, .average("date")).doubleValue == 150)
        #expect(try world.queryValue(Sample.self, .average("flag")).doubleValue == 0.75)
        #expect(try world.queryValue(Sample.self, .count("decimal")) == .integer(4))
        let refused: [(String, Select, QueryError.Code)] = [
            ("max of a to-one", .max("friend"), .typeMismatch), ("average of a to-one", .average("friend"), .typeMismatch),
            ("average of a text", .average("name"), .typeMismatch), ("sum of a to-many", .sum("pets"), .unsupported),
            ("count of a to-many", .count("pets"), .unsupported),
        ]
        for (label, select, code) in refused {
            let error = #expect(throws: QueryError.self, "\(label)") { try world.queryValue(Person.self, select) }
            #expect(error?.code == code, "\(label): \(String(describing: error))")
        }
        for (label, select) in [("sum", Select.sum("decimal")), ("min", .min("decimal")), ("median", .median("decimal"))] {
            let error = #expect(throws: QueryError.self, "\(label)") { try world.queryValue(Sample.self, select) }
            #expect(error?.code == .unsupported, "\(label) of a Decimal: \(String(describing: error))")
        }
    }

    @Test @MainActor func theSQLIsOneStatement() throws {
        let model = try Model(Person.self, Pet.self)
        let person = try #require(model.graph.entity(named: "Person"))
        let query = try AggregateQuery(entity: person, select: .select("location") | .average("age", alias: "avgAge") | .median("age"),
                                       condition: %"age" > 10, orderBy: .descending("avgAge"), groupBy: KeyList(keys: [%"location"]),
                                       having: %"avgAge" > 20, options: FetchOptions())
        #expect(query.sql.text == #"SELECT t0."location" AS "location", avg(t0."age") AS "avgAge", cs_median(t0."age") AS "median(age)" FROM "Person" AS t0 WHERE t0."age" > ? GROUP BY t0."location" HAVING avg(t0."age") > ? ORDER BY "avgAge" DESC"#)
        #expect(query.sql.arguments == [.integer(10), .integer(20)])
    }

    @Test(arguments: Setup.all) @MainActor
    func badQueriesThrowNamingTheProblem(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        #expect(throws: QueryError.self) { _ = try world.query(Person.self, .average("name")) }
        #expect(throws: QueryError.self) { _ = try world.query(Person.self, .average("nope")) }
        #expect(throws: QueryError.self) { _ = try world.query(Person.self, .select("name"), orderBy: .ascending("unknownAlias")) }
        #expect(throws: QueryError.self) { _ = try world.query(Person.self, .count("name"), having: %"unknownAlias" > 1) }
        #expect(try world.query(Person.self, .count("name", alias: "n")).first?["n"] == .integer(0))
        // Each refusal with the code Docs/Queries.md gives.
        func code(_ body: () throws -> Void) -> QueryError.Code? {
            do { try body(); return nil } catch let error as QueryError { return error.code } catch { return nil }
        }
        #expect(code { _ = try world.query(Person.self, .average("name")) } == .typeMismatch)
        #expect(code { _ = try world.query(Person.self, .average("nope")) } == .unknownKey)
        #expect(code { _ = try world.query(Person.self, .select("name"), orderBy: .ascending("unknownAlias")) } == .unknownKey)
        #expect(code { _ = try world.query(Person.self, .count("name"), having: %"unknownAlias" > 1) } == .unknownKey)
        #expect(code { _ = try world.query(Person.self, .select()) } == .unsupported)
        #expect(code { _ = try world.query(Person.self, .count("pets")) } == .unsupported)
        #expect(code { _ = try world.query(Person.self, .select("name"), having: %"name" == "x") } == .unsupported)
        #expect(code { _ = try world.query(Person.self, .count("name", alias: "n"), groupBy: %"location", having: %"location"%.caseInsensitive == "x") } == .unsupported)
        #expect(code { _ = try world.query(Sample.self, .min("decimal")) } == .unsupported)
        #expect(code { _ = try world.query(Sample.self, .count("decimal", alias: "n")) } == nil)
    }

    /// Queries.md, "Grouping": a plain key selected beside aggregates or groups must be grouped,
    /// and a `.distinct` query orders by what it selects — `.unsupported` on every store,
    /// before any SQL. (SQLite answered with an arbitrary row's value, PostgreSQL threw its
    /// own error.)
    @Test(arguments: StoreKind.available) @MainActor
    func aKeyWithNoOneValuePerRowIsRefusedOnEveryStore(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            for (name, location) in [("Ann", "Oslo"), ("Bob", "Oslo"), ("Cy", "Rome")] {
                let person = try update.create(Person.self)
                (person.name, person.location) = (name, location)
            }
            try update.commit()
        }
        try store.stack.flushAndWait()
        func code(_ body: () throws -> [Row]) -> QueryError.Code? {
            do { _ = try body(); return nil } catch { return (error as? QueryError)?.code }
        }
        #expect(code { try world.query(Person.self, .select("name") | .max("age")) } == .unsupported)
        #expect(code { try world.query(Person.self, .select("location", "name") | .count("age", alias: "n"), groupBy: %"location") } == .unsupported)
        #expect(code { try world.query(Person.self, .select("location") | .count("age", alias: "n"), groupBy: %"location",
                                       having: %"n" >= 1 && %"name" != nil) } == .unknownKey)
        #expect(code { try world.query(Person.self, .count("name", alias: "n"), orderBy: .ascending("location"),
                                       groupBy: %"location", options: .distinct) } == .unsupported)
        let grouped = try world.query(Person.self, .select("location") | .count("name", alias: "n"), orderBy: .ascending("location"),
                                      groupBy: %"location", options: .distinct)
        #expect(grouped.map { $0["n"]?.int64Value } == [2, 1])
    }

    /// What each aggregate gives over no rows and over some, on every store (Docs/Queries.md,
    /// "Selecting"): `.sum` a double, `0.0` over none; `.count` `0`; the others NULL over none.
    /// Compared case and all (`isIdentical`): `Value`'s `==` takes 70 and 70.0 as equal.
    @Test(arguments: StoreKind.available) @MainActor
    func eachAggregateOverNoRowsAndOverSome(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        let all: Select = .sum("age", alias: "s") | .average("age", alias: "a") | .min("age", alias: "mi")
            | .max("age", alias: "ma") | .stdDev("age", alias: "sd") | .median("age", alias: "me") | .count("location", alias: "c")
        func expect(_ row: Row?, _ alias: String, _ value: Value, sourceLocation: SourceLocation = #_sourceLocation) {
            #expect(row?[alias]?.isIdentical(to: value) == true, "\(alias): \(String(describing: row?[alias]))", sourceLocation: sourceLocation)
        }
        let none = try world.query(Person.self, all).first
        expect(none, "s", .double(0))
        for alias in ["a", "mi", "ma", "sd", "me"] { expect(none, alias, .null) }
        expect(none, "c", .integer(0))
        #expect(try world.queryValue(Person.self, .sum("age"), %"age" > 100).isIdentical(to: .double(0)))

        try world.beginUpdateAndWait { update in
            for (age, location) in [(30, "Kyoto"), (40, nil)] as [(Int, String?)] {
                let person = try update.create(Person.self)
                (person.age, person.location) = (age, location)
            }
            try update.commit()
        }
        try store.stack.flushAndWait()
        let some = try world.query(Person.self, all).first
        expect(some, "s", .double(70))
        expect(some, "a", .double(35))
        expect(some, "mi", .integer(30))
        expect(some, "ma", .integer(40))
        expect(some, "sd", .double(5))
        expect(some, "me", .double(35))
        expect(some, "c", .integer(1))

        // The median of two doubles is the same to the last bit on both stores: PostgreSQL's
        // interpolation, 0.1 + (0.7 - 0.1) × 0.5 = 0.4, not (0.1 + 0.7) / 2 = 0.39999999999999997.
        try world.beginUpdateAndWait { update in
            for double in [0.1, 0.7] { try update.create(Sample.self).double = double }
            try update.commit()
        }
        try store.stack.flushAndWait()
        expect(try world.query(Sample.self, .median("double", alias: "me")).first, "me", .double(0.4))
    }

    /// Where the two stores' SQL differs, queries still give one answer: a `having:` alias that
    /// is also a column's name means the alias (SQLite took the column: Taipei's one person,
    /// aged 99, passed `age >= 2`); an empty `IN` list in `having:` matches nothing
    /// (PostgreSQL cannot parse `IN ()`); `.min` and `.max` of data and UUIDs compare bytes
    /// (PostgreSQL has no `min` of `bytea`).
    @Test(arguments: StoreKind.available) @MainActor
    func havingAliasesEmptyListsAndBytesAgreeOnEveryStore(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            for (age, location) in [(10, "Kyoto"), (20, "Kyoto"), (99, "Taipei")] {
                let person = try update.create(Person.self)
                (person.age, person.location) = (age, location)
            }
            for bytes in [[0x02], [0x01, 0xFF], [0x10, 0x00]] as [[UInt8]] {
                let sample = try update.create(Sample.self)
                sample.data = Data(bytes)
                sample.uuid = UUID(uuid: (bytes[0], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, bytes.last!))
            }
            try update.commit()
        }
        try store.stack.flushAndWait()
        let crowded = try world.query(Person.self, .select("location") | .count("name", alias: "age"), groupBy: %"location", having: %"age" >= 2)
        #expect(crowded.map { $0["location"] } == [.text("Kyoto")])
        let none = try world.query(Person.self, .select("location") | .count("name", alias: "n"), groupBy: %"location", having: Key("n").in([Int]()))
        #expect(none.isEmpty)
        let every = try world.query(Person.self, .select("location") | .count("name", alias: "n"), groupBy: %"location", having: !Key("n").in([Int]()))
        #expect(every.count == 2)
        #expect(try world.queryValue(Sample.self, .min("data")) == .blob(Data([0x01, 0xFF])))
        #expect(try world.queryValue(Sample.self, .max("data")) == .blob(Data([0x10, 0x00])))
        let uuids = try world.query(Sample.self, .min("uuid", alias: "low") | .max("uuid", alias: "high")).first
        #expect(uuids?["low"] == UUID(uuid: (0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF)).storedValue)
        #expect(uuids?["high"] == UUID(uuid: (0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00)).storedValue)
    }

    /// Docs/Queries.md, "Grouping": what `having:` takes — `BETWEEN`, `IN`, `NOT`, `AND`,
    /// `OR`, a string operator with a constant pattern, an alias compared with another, a
    /// default alias named with `%K` in a format string — gives one answer on every store; what
    /// it does not take (a quantifier, an option on a comparison, `SELF`, a variable,
    /// arithmetic, a string operator whose pattern is a key) throws `.unsupported`.
    @Test(arguments: StoreKind.available) @MainActor
    func havingTakesWhatQueriesMdListsAndRefusesTheRest(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            for (age, location) in [(10, "Kyoto"), (20, "Kyoto"), (99, "Taipei"), (30, "Oslo"), (40, "Oslo"), (50, "Oslo")] {
                let person = try update.create(Person.self)
                (person.name, person.age, person.location) = ("P\(age)", age, location)
            }
            try update.commit()
        }
        try store.stack.flushAndWait()
        let selection = Select.select("location") | .count("name", alias: "n") | .min("age", alias: "minAge") | .max("age", alias: "maxAge")
        func locations(_ having: Condition, _ selection: Select = selection) throws -> [String] {
            try world.query(Person.self, selection, orderBy: .ascending("location"), groupBy: %"location", having: having)
                .compactMap { $0["location"]?.stringValue }
        }
        #expect(try locations((%"n").between(2, 3)) == ["Kyoto", "Oslo"])
        #expect(try locations((%"n").in([1, 3])) == ["Oslo", "Taipei"])
        #expect(try locations(!(%"n" >= 2)) == ["Taipei"])
        #expect(try locations(%"n" == 1 || %"minAge" >= 30 && %"maxAge" < 60) == ["Oslo", "Taipei"])
        #expect(try locations((%"location").beginsWith("O")) == ["Oslo"])
        #expect(try locations(%"maxAge" > %"minAge") == ["Kyoto", "Oslo"])
        #expect(try locations(.where("%K > %@", "average(age)", 20), .select("location") | .average("age")) == ["Oslo", "Taipei"])

        func code(_ having: Condition) -> QueryError.Code? {
            do { _ = try locations(having); return nil } catch { return (error as? QueryError)?.code }
        }
        #expect(code(.where("ANY location == 'Oslo'")) == .unsupported)
        #expect(code(%"location"%.caseInsensitive == "oslo") == .unsupported)
        #expect(code(.where("SELF == %@", 1)) == .unsupported)
        #expect(code(.where("n > $limit")) == .unsupported)
        #expect(code(.where("n + 1 > 2")) == .unsupported)
        #expect(code(.where("location BEGINSWITH location")) == .unsupported)
    }

    /// Docs/Queries.md, "Selecting": `.expression(_:alias:)` selects a key through a to-one
    /// relationship under its alias (required), and rows are keyed by that alias only; the
    /// key itself names nothing in `having:` or `orderBy:` (`.unknownKey`).
    @Test(arguments: StoreKind.available) @MainActor
    func anExpressionIsSelectedUnderItsAlias(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            let (ann, bob) = (try update.create(Person.self), try update.create(Person.self))
            (ann.name, bob.name) = ("Ann", "Bob")
            bob.friend = ann
            try update.commit()
        }
        try store.stack.flushAndWait()
        let rows = try world.query(Person.self, .select("name") | .expression("friend.name", alias: "friendName"), orderBy: .ascending("name"))
        #expect(rows.map { $0["friendName"] } == [.null, .text("Ann")])
        #expect(rows.allSatisfy { $0["friend.name"] == nil })
        let code: QueryError.Code?
        do { _ = try world.query(Person.self, .select("name") | .expression("friend.name", alias: "friendName"), orderBy: .ascending("friend.name")); code = nil }
        catch { code = (error as? QueryError)?.code }
        #expect(code == .unknownKey)
    }

    /// Docs/Queries.md, "What queries see": a query waits for the commits handed over before
    /// it to be written, with no `flush()`. Here the writer is held, so a commit to the root
    /// stays queued; a query started then waits, and counts it once the writer is let go.
    /// Without the wait it would answer at once, counting what is stored now.
    @Test(.timeLimit(.minutes(1)), arguments: StoreKind.available.filter { $0 != .memory })
    func aQueryWaitsForTheCommitsHandedOverBeforeIt(kind: StoreKind) async throws {
        let store = try TestStore(kind)
        let context = try ContextStack.Context(stack: store.stack, updateTarget: .rootContext(autoMerge: false))
        let ann = try context.beginUpdateAndWait { update in
            let ann = try update.create(Person.self)
            ann.name = "Ann"
            try update.commit()
            return ann.objectID
        }
        try await store.stack.flush()
        let release = try store.holdTheWriterFromOutside(locking: ann)
        try context.beginUpdateAndWait { update in
            try #require(try update.fetch(Person.self, id: ann)).age = 40
            try update.create(Person.self).name = "Bob"
            try update.commit()
        }
        let answer = Locked<Result<Value, any Error>?>(nil)
        Thread.detachNewThread {
            let result = Result { try context.beginUpdateAndWait { update in try update.queryValue(Person.self, .count("name")) } }
            answer.withLock { $0 = result }
        }
        // Until the query waits for the writer, or answered; a bound, not a measure.
        for _ in 0..<2000 where answer.withLock({ $0 == nil }) && store.writerWaiters < 1 { try await Task.sleep(for: .milliseconds(5)) }
        try release()
        for _ in 0..<6000 where answer.withLock({ $0 == nil }) { try await Task.sleep(for: .milliseconds(5)) }
        #expect(try answer.withLock { $0 }?.get() == .integer(2))
    }

    /// A query honours `.noSubEntities` and `.tweak` (Docs/Queries.md, "Ordering and windowing
    /// rows"): staff without engineers and managers; a tweak that narrows the condition.
    @Test @MainActor func queriesHonourNoSubEntitiesAndTweaks() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            try update.create(Staff.self).name = "Sam"
            try update.create(Engineer.self).name = "Ada"
            try update.create(Manager.self).name = "Grace"
            try update.commit()
        }
        #expect(try world.queryValue(Staff.self, .count("name")) == .integer(3))
        #expect(try world.query(Staff.self, .select("name"), options: .noSubEntities).map { $0["name"] } == [.text("Sam")])
        let tweaked = try world.query(Staff.self, .select("name"), orderBy: .ascending("name"),
                                      options: .tweak { request in request.condition = %"name" != "Grace" })
        #expect(tweaked.map { $0["name"] } == [.text("Ada"), .text("Sam")])
    }

    /// A member count aggregates as a whole number (Docs/Queries.md, "Counts of members").
    @Test @MainActor func aMemberCountIsAggregatedLikeANumber() throws {
        let store = try TestStore(.memory)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            for pets in [0, 1, 2, 5] {
                let person = try update.create(Person.self)
                for _ in 0..<pets { try update.create(Pet.self).owner = person }
            }
            try update.commit()
        }
        let row = try #require(try world.query(Person.self, .average("pets.@count", alias: "a") | .max("pets.@count", alias: "m")).first)
        #expect(row["a"] == .double(2))
        #expect(row["m"] == .integer(5))
        // fetch takes the first match; a limit of nothing gives nothing.
        #expect(try world.fetch(Person.self, options: .limit(5)) != nil)
        #expect(try world.fetch(Person.self, options: .limit(0)) == nil)
    }
}

/// The statements aggregate queries run, as Docs/Queries.md shows them: each query is exactly
/// one statement, this one. And the fetches of its first examples.
@Suite struct AggregateSQLTests {
    @Test @MainActor func fetchesRunTheSQLQueriesMdShows() async throws {
        let (store, world, select) = try await peopleForDocumentedSQL()
        let monk = try expectSQL(store.stack, [#"SELECT \#(select) FROM "Person" AS t0 WHERE t0."name" IS ? ORDER BY t0."age" ASC, t0."Z_PK" ASC LIMIT ? OFFSET ?"#]) {
            try world.fetch(Person.self, %"name" == "Monk", orderBy: .ascending("age"))
        }
        #expect(monk?.age == 63)
        // The doc's window is .limit(20) | .offset(40); a smaller one returns rows to check.
        let page = try expectSQL(store.stack, [#"SELECT \#(select) FROM "Person" AS t0 WHERE t0."age" >= ? ORDER BY t0."name" ASC, t0."Z_PK" ASC LIMIT ? OFFSET ?"#]) {
            try world.fetchAll(Person.self, %"age" >= 18, orderBy: .ascending("name"), options: .limit(2) | .offset(1))
        }
        #expect(page.map(\.name) == ["Knight", "Monk"])
        #expect(try expectSQL(store.stack, [#"SELECT count(*) FROM "Person" AS t0 WHERE t0."location" IS ?"#]) {
            try world.fetchCount(Person.self, %"location" == "Taipei")
        } == 2)
        world.reset()
        let ordered = try expectSQL(store.stack, [#"SELECT \#(select) FROM "Person" AS t0 LEFT JOIN "Person" AS t1 ON t1."Z_PK" = t0."friend" ORDER BY t0."location" ASC, t0."age" DESC, t1."name" ASC, t0."Z_PK" ASC"#]) {
            try world.fetchAll(Person.self, orderBy: .ascending("location") | .descending(\Person.age) | .ascending(%"friend.name"))
        }
        #expect(ordered.map(\.name) == ["Élise", "Knight", "monk", "Monk", "Warrior", "Farmer"])
    }

    /// Docs/Queries.md, "Selecting": `.select("pets.@count")` reads each object's number of
    /// pets, and `orderBy:` sorts by its alias.
    @Test(arguments: StoreKind.available) @MainActor func countsOfMembersAreSelectedAndOrderedBy(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            for (name, pets) in [("Ann", 1), ("Bob", 0), ("Cy", 2)] {
                let person = try update.create(Person.self)
                person.name = name
                for _ in 0..<pets { try update.create(Pet.self).owner = person }
            }
            try update.commit()
        }
        try store.stack.flushAndWait()
        let rows = try world.query(Person.self, .select("name", "pets.@count"), orderBy: .descending("pets.@count"))
        #expect(rows.map { $0["name"] } == [.text("Cy"), .text("Ann"), .text("Bob")])
        #expect(rows.map { $0["pets.@count"] } == [.integer(2), .integer(1), .integer(0)])
    }

    @Test @MainActor func queriesRunTheDocumentedSQL() async throws {
        let (store, world, _) = try await peopleForDocumentedSQL()
        let average = try expectSQL(store.stack, [#"SELECT avg(t0."age") AS "average(age)" FROM "Person" AS t0"#]) {
            try world.queryValue(Person.self, .average("age"))
        }
        #expect(average.doubleValue != nil)
        let rows = try expectSQL(store.stack, [
            #"SELECT t0."location" AS "location", avg(t0."age") AS "avgAge", cs_median(t0."age") AS "median(age)" FROM "Person" AS t0 WHERE t0."age" > ? GROUP BY t0."location" HAVING avg(t0."age") > ? ORDER BY "avgAge" DESC"#,
        ]) {
            try world.query(Person.self, .select("location") | .average("age", alias: "avgAge") | .median("age"),
                            %"age" > 10, orderBy: .descending("avgAge"), groupBy: %"location", having: %"avgAge" > 20)
        }
        #expect(!rows.isEmpty)
        _ = try expectSQL(store.stack, [
            #"SELECT t0."location" AS "location", count(t0."name") AS "n" FROM "Person" AS t0 GROUP BY t0."location" HAVING (count(t0."name") >= ? AND t0."location" IS NOT NULL)"#,
        ]) {
            try world.query(Person.self, .select("location") | .count("name", alias: "n"), groupBy: %"location", having: %"n" >= 2 && %"location" != nil)
        }
    }
}

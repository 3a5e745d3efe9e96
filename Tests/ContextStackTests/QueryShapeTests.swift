@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackPostgres
import Foundation
import Testing

/// A query of a shape already asked reuses its SQL text and binds its own values
/// (`CompiledQuery.windowSQL`; Docs/Performance.md, "What was changed"). Debug builds also
/// compare every reuse with a fresh write, so the whole suite checks the shapes; these tests
/// ask, on every store, the questions whose text depends on their values.
@Suite @MainActor struct QueryShapeTests {
    /// People named A1…A3, B1, B2, one without a location, and one whose name begins with the
    /// last scalar there is (a prefix of it has no successor).
    ///
    /// `ownModel`: a model no other test uses (a configuration of its own makes it one), so that
    /// its entities' cache of texts holds this test's shapes alone: equal models share one.
    private static func people(_ kind: StoreKind, ownModel: Bool = false) throws -> (TestStore, MainContext) {
        let model = ownModel ? try Model(fullModelTypes, configurations: ["QueryShapeTests \(kind)": fullModelTypes]) : nil
        let store = try TestStore(kind, model: model)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            for (index, name) in ["A1", "A2", "A3", "B1", "B2", "\u{10FFFF}\u{10FFFF}x"].enumerated() {
                let person = try update.create(Person.self)
                person.name = name
                person.age = index
                person.location = index == 3 ? nil : "L\(index % 2)"
            }
            try update.commit()
        }
        try store.stack.flushAndWait()
        return (store, world)
    }

    private static func names(_ people: [Person]) -> [String] { people.map(\.name) }

    @Test(arguments: StoreKind.available)
    func aShapeAskedAgainGetsTheRowsOfItsOwnValues(kind: StoreKind) throws {
        let (store, world) = try Self.people(kind)
        defer { withExtendedLifetime(store) {} }
        let byName: OrderBy = .ascending("name")
        #expect(Self.names(try world.fetchAll(Person.self, %"age" > 3, orderBy: byName)) == ["B2", "\u{10FFFF}\u{10FFFF}x"])
        #expect(Self.names(try world.fetchAll(Person.self, %"age" > 1, orderBy: byName)) == ["A3", "B1", "B2", "\u{10FFFF}\u{10FFFF}x"])
        // == nil is IS NULL, == a value binds it.
        #expect(Self.names(try world.fetchAll(Person.self, %"location" == "L0", orderBy: byName)) == ["A1", "A3", "B2"])
        #expect(Self.names(try world.fetchAll(Person.self, %"location" == nil, orderBy: byName)) == ["B1"])
        #expect(Self.names(try world.fetchAll(Person.self, %"location" == "L1", orderBy: byName)) == ["A2", "\u{10FFFF}\u{10FFFF}x"])
        // An IN list has a placeholder a member; none matches nothing.
        #expect(Self.names(try world.fetchAll(Person.self, (%"name").in(["A1", "B1"]), orderBy: byName)) == ["A1", "B1"])
        #expect(Self.names(try world.fetchAll(Person.self, (%"name").in(["A2", "B2", "A3"]), orderBy: byName)) == ["A2", "A3", "B2"])
        #expect(Self.names(try world.fetchAll(Person.self, (%"name").in([String]()), orderBy: byName)) == [])
        // A prefix range has an upper bound unless the prefix has no successor.
        #expect(Self.names(try world.fetchAll(Person.self, (%"name").beginsWith("A"), orderBy: byName)) == ["A1", "A2", "A3"])
        #expect(Self.names(try world.fetchAll(Person.self, (%"name").beginsWith("\u{10FFFF}\u{10FFFF}"), orderBy: byName)) == ["\u{10FFFF}\u{10FFFF}x"])
        #expect(Self.names(try world.fetchAll(Person.self, (%"name").beginsWith("B"), orderBy: byName)) == ["B1", "B2"])
        // Windows: limited, offset, neither.
        let under5 = %"age" < 5
        #expect(Self.names(try world.fetchAll(Person.self, under5, orderBy: byName, options: .limit(2))) == ["A1", "A2"])
        #expect(Self.names(try world.fetchAll(Person.self, under5, orderBy: byName, options: .limit(2) | .offset(3))) == ["B1", "B2"])
        #expect(Self.names(try world.fetchAll(Person.self, under5, orderBy: byName)) == ["A1", "A2", "A3", "B1", "B2"])
        #expect(Self.names(try world.fetchAll(Person.self, under5, orderBy: byName, options: .offset(4))) == ["B2"])
        // The same keys and values, other trees.
        #expect(Self.names(try world.fetchAll(Person.self, %"age" > 3 || %"name" == "A1", orderBy: byName)) == ["A1", "B2", "\u{10FFFF}\u{10FFFF}x"])
        #expect(Self.names(try world.fetchAll(Person.self, %"age" > 3 && %"name" == "B2", orderBy: byName)) == ["B2"])
        #expect(Self.names(try world.fetchAll(Person.self, !(%"age" > 0) || %"name" == "B2", orderBy: byName)) == ["A1", "B2"])
    }

    /// Values that change the text make shapes of their own; others share one. Fails if the
    /// texts are not kept (no entry) or if a value the text depends on is left out of the shape
    /// (one entry where there must be two).
    @Test(arguments: StoreKind.available)
    func valuesTheTextDependsOnMakeShapesOfTheirOwn(kind: StoreKind) throws {
        let (store, world) = try Self.people(kind, ownModel: true)
        defer { withExtendedLifetime(store) {} }
        let entity = store.stack.graph.entity(for: Person.self)
        let shapes = { entity.windowTexts.withLock { $0.count } }
        #expect(shapes() == 0)
        _ = try world.fetchAll(Person.self, %"age" > 3)
        _ = try world.fetchAll(Person.self, %"age" > 1)
        #expect(shapes() == 1)
        _ = try world.fetchAll(Person.self, %"location" == "L0")
        _ = try world.fetchAll(Person.self, %"location" == "L1")
        #expect(shapes() == 2)
        _ = try world.fetchAll(Person.self, %"location" == nil)
        #expect(shapes() == 3)
        _ = try world.fetchAll(Person.self, (%"name").in(["A1", "B1"]))
        _ = try world.fetchAll(Person.self, (%"name").in(["A2", "B2"]))
        #expect(shapes() == 4)
        _ = try world.fetchAll(Person.self, (%"name").in(["A2", "B2", "A3"]))
        #expect(shapes() == 5)
        _ = try world.fetchAll(Person.self, (%"name").beginsWith("A"))
        _ = try world.fetchAll(Person.self, (%"name").beginsWith("B"))
        #expect(shapes() == 6)
        _ = try world.fetchAll(Person.self, (%"name").beginsWith("\u{10FFFF}"))
        #expect(shapes() == 7)
        _ = try world.fetchAll(Person.self, %"age" > 3, options: .limit(1))
        _ = try world.fetchAll(Person.self, %"age" > 5, options: .limit(4))
        #expect(shapes() == 8)
        // A quantifier is written afresh every time.
        _ = try world.fetchAll(Person.self, %"pets.age"%.any > 1)
        #expect(shapes() == 8)
    }

    /// A window's order by key, and the tie-break of an order, follow the primary key's index,
    /// so the database reads the index instead of sorting every row. On PostgreSQL the key's
    /// term once said `ASC NULLS FIRST`, which the index (NULL last) cannot serve: a fetch of
    /// 100,000 rows sorted them all, on disk.
    @Test(arguments: StoreKind.available.filter { $0 != .memory })
    func keyOrderIsTheOrderOfThePrimaryKeysIndex(kind: StoreKind) throws {
        let (store, world) = try Self.people(kind)
        defer { withExtendedLifetime(store) {} }
        let counter = StatementCounter(store.stack)
        var people: [Person] = []
        let statements = try counter.during { people = try world.fetchAll(Person.self, options: .limit(100)) }
        store.stack.trace(nil)
        #expect(Self.names(people) == ["A1", "A2", "A3", "B1", "B2", "\u{10FFFF}\u{10FFFF}x"])
        let sql = try #require(statements.first { $0.contains("FROM \"Person\"") && $0.contains("ORDER BY") })
        let plan: String
        if let database = store.database {
            let db = try PostgresConnection(PostgresSettings(url: database.url))
            try db.execute("SET enable_sort = off")
            plan = try db.allRows("EXPLAIN " + sql.replacingOccurrences(of: "?", with: "NULL")).map { "\($0)" }.joined(separator: "\n")
            #expect(plan.contains("Index") && !plan.contains("Sort"), "\(sql)\n\(plan)")
        } else {
            plan = try store.rawConnection().rows("EXPLAIN QUERY PLAN " + sql).map { "\($0)" }.joined(separator: "\n")
            #expect(!plan.contains("TEMP B-TREE"), "\(sql)\n\(plan)")
        }
    }

    /// A fetch without an order or a window comes in key order, and puts its objects in it
    /// itself: its SQL has no `ORDER BY`, so a range on another column's index is read in that
    /// index's order without a sort in the database. Tags named in the reverse of their keys'
    /// order, read through the index on `name`.
    @Test(arguments: StoreKind.available)
    func aFetchWithoutOrderComesInKeyOrderWithoutSortingInSQL(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        let names = (0..<40).map { "tag-\(String(format: "%02d", 39 - $0))" }
        try world.beginUpdateAndWait { update in
            for name in names { try update.create(Tag.self).name = name }
            try update.commit()
        }
        try store.stack.flushAndWait()
        world.reset()
        let counter = StatementCounter(store.stack)
        var tags: [Tag] = []
        let statements = try counter.during { tags = try world.fetchAll(Tag.self, (%"name").beginsWith("tag-")) }
        #expect(tags.map(\.name) == names, "key order, which is the reverse of the names' order")
        let keys = tags.map(\.objectID.primaryKey)
        #expect(keys == keys.sorted())
        let sql = try #require(statements.first { $0.contains("FROM \"Tag\"") })
        #expect(!sql.contains("ORDER BY"), "\(sql)")
        // With a window, SQL orders by key itself.
        let windowed = try counter.during { tags = try world.fetchAll(Tag.self, (%"name").beginsWith("tag-"), options: .limit(3)) }
        #expect(tags.map(\.name) == Array(names.prefix(3)))
        store.stack.trace(nil)
        #expect(windowed.contains { $0.contains("FROM \"Tag\"") && $0.contains("ORDER BY") })
        // With pending changes, the objects merge in memory and keep key order.
        try world.beginUpdateAndWait { update in
            let first = try #require(try update.fetchAll(Tag.self, (%"name").beginsWith("tag-")).first)
            first.name = "tag-99"
            let made = try update.create(Tag.self)
            made.name = "tag-00a"
            let merged = try update.fetchAll(Tag.self, (%"name").beginsWith("tag-"))
            let mergedKeys = merged.map(\.objectID.primaryKey)
            #expect(mergedKeys == mergedKeys.sorted() && merged.count == names.count + 1)
        }
    }
}

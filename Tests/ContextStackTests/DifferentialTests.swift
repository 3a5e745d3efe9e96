@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// SQL and in-memory evaluation must agree on every predicate and every order: the store's
/// answer is compared with the engine's own evaluation of the same compiled query.
@Suite struct DifferentialTests {
    static let strings = ["", "a", "A", "b", "é", "e\u{301}", "É", "Monk", "monk", "MONK", "ñ", "z", "Ω", "a\u{0}", "10", "9", " "]

    /// PostgreSQL cannot hold U+0000 in text (it refuses such a value whole, Docs/Postgres.md),
    /// so runs on it draw from the strings without one.
    @TaskLocal static var refusesNUL = false
    static let stringsWithoutNUL = strings.filter { !$0.contains("\u{0}") }

    static func randomString(_ rng: inout SeededGenerator) -> String {
        (refusesNUL ? stringsWithoutNUL : strings).randomElement(using: &rng)!
    }
    static func randomOptionalString(_ rng: inout SeededGenerator) -> String? {
        Bool.random(using: &rng) && Bool.random(using: &rng) ? nil : randomString(&rng)
    }
    static func randomAge(_ rng: inout SeededGenerator) -> Int {
        [Int.min, -1, 0, 1, 2, 18, 30, 99, Int.max].randomElement(using: &rng)!
    }

    static func randomCondition(_ rng: inout SeededGenerator, depth: Int = 0) -> Condition {
        if depth < 3 && Int.random(in: 0..<3, using: &rng) == 0 {
            switch Int.random(in: 0..<3, using: &rng) {
            case 0: return randomCondition(&rng, depth: depth + 1) && randomCondition(&rng, depth: depth + 1)
            case 1: return randomCondition(&rng, depth: depth + 1) || randomCondition(&rng, depth: depth + 1)
            default: return !randomCondition(&rng, depth: depth + 1)
            }
        }
        let prefix = ["", "", "friend.", "friend.friend."].randomElement(using: &rng)!
        let options = [MatchOptions(), .caseInsensitive, .diacriticInsensitive, [.caseInsensitive, .diacriticInsensitive]].randomElement(using: &rng)!
        let textKey = Key(prefix + ["name", "location"].randomElement(using: &rng)!)
        switch Int.random(in: 0..<25, using: &rng) {
        case 24:
            // A quantifier through a to-one hop, whose owner may change or be pending.
            let quantifier = ["ANY ", "ALL ", "NONE ", ""].randomElement(using: &rng)!
            return Bool.random(using: &rng) ? Condition.where("\(quantifier)friend.friendOf.age > %@", randomAge(&rng))
                : Condition.where("\(quantifier)friend.friendOf.location == %@", randomString(&rng))
        case 21:
            // Collection operators over friendOf, read through pending members too. (Sums and
            // averages of these extreme ages overflow or round; PredicateLanguageTests checks them.)
            let function = ["@min.age", "@max.age", "@max.name", "@min.location", "@count"].randomElement(using: &rng)!
            let value: any Sendable = function.hasSuffix("age") || function == "@count" ? Int.random(in: 0..<40, using: &rng) : randomString(&rng)
            return Condition.where("friendOf.\(function) \(["<", ">=", "==", "!="].randomElement(using: &rng)!) %@", value)
        case 22:
            // SUBQUERY with a reference to the object outside it.
            return Condition.where("SUBQUERY(friendOf, $f, $f.age >= %@ AND ($f.name BEGINSWITH[c] %@ OR $f.age < age)).@count \(["==", ">", "<="].randomElement(using: &rng)!) %@",
                                   randomAge(&rng), randomString(&rng), Int.random(in: 0..<3, using: &rng))
        case 23:
            // Arithmetic, also through to-one hops.
            let op = ["+", "-", "*", "/", "**"].randomElement(using: &rng)!
            return Condition.where("\(prefix)age \(op) %@ \(["<", ">", "==", "!="].randomElement(using: &rng)!) %@", Int.random(in: -2..<4, using: &rng), Int.random(in: -5..<60, using: &rng))
        case 19:
            // Options on comparisons: both sides folded.
            let key = MatchOptions([.caseInsensitive]) == options ? textKey.caseInsensitive : textKey.caseInsensitive.diacriticInsensitive
            return [key == randomString(&rng), key < randomString(&rng), key >= Key("location"), key.in([randomString(&rng), randomString(&rng)])]
                .randomElement(using: &rng)!
        case 20: return Condition.where("SELF IN %@ OR friend == SELF", [countMarker])
        case 15: return Key("friendOf.age").any > randomAge(&rng)
        case 16: return Key("friendOf.name").all >= randomString(&rng)
        case 17: return Key("friendOf.location").none == randomOptionalString(&rng)
        case 18: return Key("friendOf.@count") > Int.random(in: 0..<3, using: &rng)
        case 8: return textKey.contains(randomString(&rng), options: options)
        case 9: return textKey.beginsWith(randomString(&rng), options: options)
        case 10: return textKey.endsWith(randomString(&rng), options: options)
        case 11: return textKey.like(["*", "?", "M*", "*o*", "?onk", "e*", "*", ""].randomElement(using: &rng)!, options: options)
        case 12: return textKey.matches(["M.*", ".*", "[a-z]+", "é|e", ".?"].randomElement(using: &rng)!, options: options)
        case 13: return Key(prefix + "age").in((0..<Int.random(in: 0..<4, using: &rng)).map { _ in randomAge(&rng) })
        case 14:
            let bounds = [randomAge(&rng), randomAge(&rng)]
            return Key(prefix + "age").between(bounds.min()!, bounds.max()!)
        case 0: return Key(prefix + "age") == randomAge(&rng)
        case 1: return Key(prefix + "age") > randomAge(&rng)
        case 2: return Key(prefix + "age") <= Double(Int.random(in: -5...40, using: &rng)) + 0.5
        case 3: return Key(prefix + "name") < randomString(&rng)
        case 4: return Key(prefix + "location") != randomString(&rng)
        case 5: return Bool.random(using: &rng) ? Key(prefix + "location") == nil : Key(prefix + "location") != nil
        case 6: return Key(prefix + "name") >= Key("location")
        case 7 where Bool.random(using: &rng): return Key(prefix + "location").in([randomOptionalString(&rng), randomOptionalString(&rng)])
        default: return Key(prefix + "location") == Key("name")
        }
    }

    static func randomOrder(_ rng: inout SeededGenerator) -> OrderBy {
        let keys = ["name", "age", "location", "friend.name", "friend.age"]
        var order = Bool.random(using: &rng) ? OrderBy.ascending(keys.randomElement(using: &rng)!) : .descending(keys.randomElement(using: &rng)!)
        if Bool.random(using: &rng) { order = order | .descending(keys.randomElement(using: &rng)!) }
        return order
    }

    /// Stands for one counted object, so IDs and count compare in one expectation.
    static let countMarker = ObjectID(rootEntity: Person.entityDescription, primaryKey: -1)

    /// `count` random people with random friends, committed by `update`.
    static func populate(_ update: Update, _ rng: inout SeededGenerator, count: Int) throws {
        var people: [Person] = []
        for _ in 0..<count {
            let person = try update.create(Person.self)
            person.name = randomString(&rng)
            person.age = randomAge(&rng)
            person.location = randomOptionalString(&rng)
            people.append(person)
        }
        for person in people where Int.random(in: 0..<3, using: &rng) > 0 {
            person.friend = people.randomElement(using: &rng)
        }
        try update.commit()
    }

    /// Every seed on every setup; the default setup (three-tier, in memory) gets the most cases.
    static let differentialRuns: [(Setup, UInt64)] = { let seeds = propertySeeds(); return Setup.all.flatMap { setup in seeds.map { (setup, $0) } } }()

    @Test(arguments: differentialRuns) @MainActor
    func sqlAndMemoryAgreeOnPredicatesAndOrder(setup: Setup, seed: UInt64) async throws {
        try await Self.$refusesNUL.withValue(setup.kind == .postgres) {
            try await compareSQLAndMemory(setup: setup, seed: seed)
        }
    }

    @MainActor private func compareSQLAndMemory(setup: Setup, seed: UInt64) async throws {
        var rng = SeededGenerator(seed: seed)
        let harness = try TopologyHarness(setup)
        let world = harness.world
        var local = rng
        try await harness.write { update in try Self.populate(update, &local, count: 60) }
        rng = local
        let store = harness.store
        let entity = store.stack.graph.entity(for: Person.self)
        let iterations = setup.topology == .threeTier && setup.kind == .memory ? 1500 : 300
        let all = try world.fetchAll(Person.self)
        var rows: [ObjectID: ObjectRow] = [:]
        for person in all { rows[person.objectID] = ObjectRow(entity: entity, values: person.values) }
        let resolve: CompiledQuery.RowResolver = { rows[$0] }
        // Members of a to-many with a to-one inverse: the rows whose inverse points at the owner.
        let members: CompiledQuery.MemberResolver = { owner, property in
            let inverse = try #require(property.inverse)
            return rows.filter { $0.value.values[inverse.slot] == .integer(owner.primaryKey) }.map(\.key).sorted()
        }

        for iteration in 0..<iterations {
            let condition = Self.randomCondition(&rng)
            let order = Self.randomOrder(&rng)
            let query = try CompiledQuery(entity: entity, condition: condition, orderBy: order)
            let fromSQL = try world.fetchIDs(Person.self, condition, orderBy: order)
            let inMemory = try rows.filter { try query.matches($0.key, $0.value.values, resolve: resolve, members: members) }
                .map { (id: $0.key, values: $0.value.values) }
                .sorted { try query.sortsBefore($0, $1, resolve: resolve) }
                .map(\.id)
            #expect(fromSQL == inMemory, "\(setup), seed \(seed), case \(iteration): \(condition) ORDER BY \(order)")
            if fromSQL != inMemory { return }
        }
    }

    /// A fetch inside an update, with pending inserts, changes and deletions, must return what
    /// the same fetch returns once those changes are committed.
    @Test(arguments: propertySeeds()) @MainActor
    func fetchesWithPendingChangesMatchFetchesAfterCommit(seed: UInt64) async throws {
        var rng = SeededGenerator(seed: seed)
        for round in 0..<12 {
            let store = try TestStore(.memory)
            let world = try MainContext(stack: store.stack)
            var seeded = rng
            try world.beginUpdateAndWait { update in try Self.populate(update, &seeded, count: 25) }
            rng = seeded
            if round.isMultiple(of: 2) { try await store.stack.flush() }  // half the rounds read through the overlay
            let queries = (0..<40).map { _ in
                (Self.randomCondition(&rng), Self.randomOrder(&rng), Int.random(in: 0..<4, using: &rng), Int.random(in: 1..<12, using: &rng))
            }
            var local = rng
            let pending: [[ObjectID]] = try world.beginUpdateAndWait { update in
                let people = try update.fetchAll(Person.self)
                for person in people {
                    switch Int.random(in: 0..<6, using: &local) {
                    case 0: try update.delete(person)
                    case 1: person.age = Self.randomAge(&local)
                    case 2: person.location = Self.randomOptionalString(&local)
                    case 3: person.friend = people.randomElement(using: &local).flatMap { $0.isDeleted ? nil : $0 }
                    default: break
                    }
                }
                for _ in 0..<5 {
                    let person = try update.create(Person.self)
                    person.name = Self.randomString(&local)
                    person.age = Self.randomAge(&local)
                    person.location = Self.randomOptionalString(&local)
                    person.friend = try update.fetchAll(Person.self).randomElement(using: &local)
                }
                let results = try queries.map { condition, order, offset, limit in
                    try update.fetchIDs(Person.self, condition, orderBy: order, options: .offset(offset) | .limit(limit))
                        + [ObjectID](repeating: Self.countMarker, count: try update.fetchCount(Person.self, condition))
                }
                try update.commit()
                return results
            }
            rng = local
            try await store.stack.flush()
            for (index, (condition, order, offset, limit)) in queries.enumerated() {
                let committed = try world.fetchIDs(Person.self, condition, orderBy: order, options: .offset(offset) | .limit(limit))
                    + [ObjectID](repeating: Self.countMarker, count: try world.fetchCount(Person.self, condition))
                #expect(pending[index] == committed, "seed \(seed), round \(round): \(condition) ORDER BY \(order) OFFSET \(offset) LIMIT \(limit)")
            }
        }
    }
}

@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// Predicates built from untrusted input: each gives its documented error, and nothing reaches
/// SQL as text.
@Suite struct HostileInputTests {
    @MainActor func world() throws -> (TestStore, MainContext) {
        let store = try TestStore(.file)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "Monk"
            try update.commit()
        }
        try store.stack.flushAndWait()
        return (store, world)
    }

    @Test(arguments: ["name; DROP TABLE Person", "name\" OR 1=1 --", "Z_PK", "friend.name.x", "", "pets"])
    @MainActor func keysFromInputAreCheckedAgainstTheModel(key: String) throws {
        let (store, world) = try world()
        #expect {
            try world.fetchAll(Person.self, %key == "x")
        } throws: { $0 is QueryError }
        #expect(try store.scalar("SELECT count(*) FROM \"Person\"") == .integer(1))
    }

    @Test(arguments: ["'; DROP TABLE Person; --", "\" OR \"1\"=\"1", "%", "\0", "long"])
    @MainActor func valuesFromInputAreBoundNeverSpliced(value: String) throws {
        let value = value == "long" ? String(repeating: "x'", count: 50_000) : value
        let (store, world) = try world()
        #expect(try world.fetchCount(Person.self, %"name" == value) == 0)
        #expect(try world.fetchCount(Person.self, .where("name == %@ OR name LIKE %@", value, value)) == 0)
        #expect(try store.scalar("SELECT count(*) FROM \"Person\"") == .integer(1))
    }

    /// Key paths that are valid against the model but reach through more tables than SQLite
    /// joins in one query: a `QueryError` before any SQL runs, in conditions (built and
    /// parsed), orders and counts alike. One hop fewer than the limit still runs.
    @Test(arguments: [63, 64, 100, 5_000])
    @MainActor func toOneKeyPathsLongerThanSQLiteJoinsThrowBeforeSQL(hops: Int) throws {
        let (store, world) = try world()
        let key = Array(repeating: "friend", count: hops).joined(separator: ".") + ".age"
        let counter = StatementCounter(store.stack)
        let attempts: [() throws -> Void] = [
            { _ = try world.fetchAll(Person.self, %key > 3) },
            { _ = try world.fetchAll(Person.self, .where("\(key) > 3")) },
            { _ = try world.fetchCount(Person.self, %key == nil) },
            { _ = try world.fetchAll(Person.self, orderBy: .ascending(key)) },
        ]
        for attempt in attempts {
            if hops < CompiledQuery.maximumTables {
                try attempt()
            } else {
                let statements = counter.during {
                    #expect {
                        try attempt()
                    } throws: { ($0 as? QueryError)?.code == .unsupported }
                }
                #expect(statements.isEmpty, "\(statements.map { $0.prefix(80) })")
            }
        }
    }

    @Test(arguments: ["name ==", "((((name == 'a'", "name == 'a' AND", "name IN {", "name MATCHES '('", "$x == 1", "name == %@ %@"])
    @MainActor func malformedFormatStringsThrowInvalidFormatOrUnsupported(format: String) throws {
        let (store, world) = try world()
        defer { withExtendedLifetime(store) {} }
        #expect {
            try world.fetchAll(Person.self, .where(format, "a"))
        } throws: { error in
            guard let error = error as? QueryError else { return false }
            return error.code == .invalidFormat || error.code == .unsupported
        }
    }

    @Test @MainActor func aVeryDeepFormatStringThrowsInsteadOfOverflowingTheStack() throws {
        let (store, world) = try world()
        defer { withExtendedLifetime(store) {} }
        let deep = String(repeating: "(", count: 50_000) + "name == 'a'" + String(repeating: ")", count: 50_000)
        #expect {
            try world.fetchAll(Person.self, .where(deep))
        } throws: { ($0 as? QueryError)?.code == .invalidFormat }
    }

    /// A condition built in code from a long list of inputs (a left-deep chain of `||`, as
    /// `reduce` makes it) runs however long it is: chains are flattened without recursion and
    /// rebuilt balanced, so compiling, evaluating and the SQL nest log n deep, not n. (SQLite
    /// plans a long OR in time that grows with its square — 20,000 terms take seconds — so the
    /// test stays at 2,000; `%"name"%.in(list)` is the form for long lists.)
    @Test(arguments: [50, 2_000]) @MainActor
    func aLongConditionBuiltInCodeRuns(terms: Int) throws {
        let (store, world) = try world()
        defer { withExtendedLifetime(store) {} }
        var condition: Condition = %"name" == "nobody"
        for index in 0..<terms { condition = condition || %"name" == "name \(index)'; --" }
        condition = condition || %"name" == "Monk"
        #expect(try world.fetchCount(Person.self, condition) == 1)
        #expect(try world.fetchAll(Person.self, condition).map(\.name) == ["Monk"])
        #expect(try world.query(Person.self, .count("name", alias: "n"), groupBy: %"name", having: condition).count == 1)
        // And in memory, for pending changes, in an update.
        try world.beginUpdateAndWait { update in
            try update.create(Person.self).name = "name 7'; --"
            #expect(try update.fetchCount(Person.self, condition) == 2)
        }
        #expect(condition.description.hasPrefix("(name == \"nobody\" OR name == "))
    }
}

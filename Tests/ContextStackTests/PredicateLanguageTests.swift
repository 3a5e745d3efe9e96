@testable import ContextStack
import _ContextStackCore
import _ContextStackPostgres
@testable import _ContextStackModel
import Foundation
import Testing

/// The parts of Apple's predicate language beyond a key against a value: options on every
/// comparison, SELF, values on the left of IN and CONTAINS, to-many key paths, constants,
/// LIKE escapes and variables. Both paths — SQL on every store, and in-memory evaluation — are
/// checked against `ReferencePredicate`, an independent statement of their meaning.
@Suite struct PredicateLanguageTests {
    static let runs: [(Setup, UInt64)] = { let seeds = propertySeeds(); return Setup.all.flatMap { setup in seeds.map { (setup, $0) } } }()

    @Test(arguments: runs) @MainActor
    func bothPathsAgreeWithTheReference(setup: Setup, seed: UInt64) async throws {
        var rng = SeededGenerator(seed: seed)
        var world = ReferencePredicate.randomWorld(&rng, count: 30)
        let harness = try TopologyHarness(setup)
        let stored = world
        let ids = try await harness.write { update -> ([ObjectID], [ObjectID]) in
            let people = try stored.people.map { row in
                let person = try update.create(Person.self)
                person.name = row.name
                person.age = row.age
                person.location = row.location
                return person
            }
            for (person, row) in zip(people, stored.people) { person.friend = row.friend.map { people[$0] } }
            let pets = try stored.pets.map { row in
                let pet = try update.create(Pet.self)
                pet.name = row.name
                pet.age = row.age
                pet.owner = row.owner.map { people[$0] }
                return pet
            }
            try update.commit()
            return (people.map(\.objectID), pets.map(\.objectID))
        }
        (world.personIDs, world.petIDs) = ids
        let index = Dictionary(uniqueKeysWithValues: world.personIDs.enumerated().map { ($0.element, $0.offset) })

        // The in-memory path: the same compiled query evaluated on the rows.
        let graph = harness.store.stack.graph
        let personEntity = graph.entity(for: Person.self)
        var rows: [ObjectID: ObjectRow] = [:]
        for person in try harness.world.fetchAll(Person.self) { rows[person.objectID] = ObjectRow(entity: personEntity, values: person.values) }
        for pet in try harness.world.fetchAll(Pet.self) { rows[pet.objectID] = ObjectRow(entity: graph.entity(for: Pet.self), values: pet.values) }
        let resolve: CompiledQuery.RowResolver = { rows[$0] }
        let members: CompiledQuery.MemberResolver = { owner, property in
            let inverse = try #require(property.inverse)
            let destination = try #require(property.destination)
            return rows.filter { $0.key.rootEntity === destination.rootDescription && $0.value.values[inverse.slot] == .integer(owner.primaryKey) }
                .map(\.key).sorted()
        }

        let cases = setup.topology == .threeTier ? 300 : 60
        for number in 0..<cases {
            let predicate = ReferencePredicate.random(&rng, in: world)
            let (format, arguments, variables) = predicate.render(world)
            var condition = Condition.where(format, argumentArray: arguments)
            if !variables.isEmpty { condition = condition.substituting(variables) }
            let expected = Set(world.people.indices.filter { predicate.evaluate(person: $0, in: world) == true }.map { world.personIDs[$0] })
            let fromSQL = Set(try harness.world.fetchIDs(Person.self, condition))
            let query = try CompiledQuery(entity: personEntity, condition: condition, orderBy: nil, dialect: harness.store.stack.store.dialect)
            let inMemory = Set(try world.personIDs.filter { try query.matches($0, rows[$0]!.values, resolve: resolve, members: members) })
            let describe = { (ids: Set<ObjectID>) in ids.compactMap { index[$0] }.sorted() }
            #expect(fromSQL == expected, "\(setup), seed \(seed), case \(number): \(format) — SQL adds \(describe(fromSQL.subtracting(expected))), misses \(describe(expected.subtracting(fromSQL)))")
            #expect(inMemory == expected, "\(setup), seed \(seed), case \(number): \(format) — memory adds \(describe(inMemory.subtracting(expected))), misses \(describe(expected.subtracting(inMemory)))")
            if fromSQL != expected || inMemory != expected {
                let involved = fromSQL.symmetricDifference(expected).union(inMemory.symmetricDifference(expected)).compactMap { index[$0] }.sorted()
                Issue.record("arguments \(arguments), variables \(variables); people \(involved.map { (world.people[$0], $0) })")
                return
            }
        }
    }

    // MARK: - Each form, with the SQL it becomes

    static func compiled(_ condition: Condition) throws -> CompiledQuery {
        let graph = try Model(Person.self, Pet.self).graph
        return try CompiledQuery(entity: graph.entity(for: Person.self), condition: condition, orderBy: nil)
    }

    static func whereSQL(_ condition: Condition) throws -> String {
        let text = try compiled(condition).fromWhere().text
        return String(text[text.range(of: " WHERE ")!.upperBound...])
    }

    /// Docs/Predicates.md's SQL, as written there: the quantifier table's `NONE` and a member
    /// key through a to-one hop; a many-to-many's join table, which side is `source` and which
    /// `target`; the joins of two hop chains, named in the order of their dotted names, not of
    /// the condition; and the codes `cs_text` is bound with for each operator and option set.
    @Test func theSQLPredicatesMdShows() throws {
        #expect(try Self.whereSQL(%"pets.name"%.none == "Rex")
                == #"(NOT EXISTS (SELECT 1 FROM "Pet" AS q1_t0 WHERE q1_t0."owner" = t0."Z_PK" AND q1_t0."name" IS ?))"#)
        #expect(try Self.whereSQL(%"pets.owner.name"%.any == "Ann")
                == #"EXISTS (SELECT 1 FROM "Pet" AS q1_t0 LEFT JOIN "Person" AS q1_t1 ON q1_t1."Z_PK" = q1_t0."owner" WHERE q1_t0."owner" = t0."Z_PK" AND q1_t1."name" IS ?)"#)

        let graph = try Model(Article.self, Tag.self).graph
        func sql<T: ManagedObject>(_ type: T.Type, _ condition: Condition) throws -> String {
            try CompiledQuery(entity: graph.entity(for: type), condition: condition, orderBy: nil).fromWhere().text
        }
        #expect(try sql(Article.self, %"tags.name"%.any == "swift").hasSuffix(
            #" WHERE EXISTS (SELECT 1 FROM "Tag" AS q1_t0 WHERE q1_t0."Z_PK" IN (SELECT target FROM "Z_Article_tags_Tag_articles" WHERE source = t0."Z_PK") AND q1_t0."name" IS ?)"#))
        #expect(try sql(Tag.self, %"articles.@count" == 1).hasSuffix(
            #" WHERE (SELECT count(*) FROM "Z_Article_tags_Tag_articles" WHERE target = t0."Z_PK") IS ?"#))

        let joins = try Self.compiled(%"friend.friend.name" == "Farmer" && %"friend.name" == "Knight").fromWhere().text
        #expect(joins.hasSuffix(#"FROM "Person" AS t0 LEFT JOIN "Person" AS t1 ON t1."Z_PK" = t0."friend" LEFT JOIN "Person" AS t2 ON t2."Z_PK" = t1."friend" WHERE (t2."name" IS ? AND t1."name" IS ?)"#),
                "\(joins)")

        let codes: [(Condition, [Value])] = [
            (%"name"%.like("M?nk"), [.integer(0), .integer(0), .text("M?nk")]),
            (%"name"%.contains("onk", options: .caseInsensitive), [.integer(1), .integer(1), .text("onk")]),
            (%"name"%.beginsWith("M", options: .caseInsensitive), [.integer(2), .integer(1), .text("M")]),
            (%"name"%.endsWith("k", options: [.caseInsensitive, .diacriticInsensitive]), [.integer(3), .integer(3), .text("k")]),
            (%"name"%.matches("M.n.*"), [.integer(4), .integer(0), .text("M.n.*")]),
        ]
        for (condition, arguments) in codes {
            #expect(try Self.whereSQL(condition) == #"cs_text(?, ?, t0."name", ?)"#)
            #expect(try Self.compiled(condition).fromWhere().arguments == arguments, "\(condition)")
        }
    }

    /// Docs/Predicates.md, "Format strings": `%li` and `%lli` take integers as `%d` does, and
    /// `%@` takes an `ArraySlice` or a `ContiguousArray` as a list.
    @Test func lengthModifiedIntegersAndSlicesAreFormatArguments() throws {
        #expect(try Self.compiled(.where("age > %li AND age < %lli", 35, 60)).fromWhere().arguments == [.integer(35), .integer(60)])
        #expect(try Self.whereSQL(.where("age IN %@", [18, 19, 20][1...])) == #"t0."age" IN (?, ?)"#)
        #expect(try Self.compiled(.where("age IN %@", [18, 19, 20][1...])).fromWhere().arguments == [.integer(19), .integer(20)])
        #expect(try Self.compiled(.where("age IN %@", ContiguousArray([7]))).fromWhere().arguments == [.integer(7)])
    }

    @Test func optionsFoldTextOnEveryComparison() throws {
        #expect(try Self.whereSQL(.where("name ==[c] 'ADA'")) == #"cs_fold(1, t0."name") IS ?"#)
        #expect(try Self.compiled(.where("name ==[c] 'ADA'")).fromWhere().arguments == [.text("ada")])
        #expect(try Self.whereSQL(.where("name <[cd] location")) == #"cs_fold(3, t0."name") < cs_fold(3, t0."location")"#)
        #expect(try Self.whereSQL(.where("name BETWEEN[d] {'a', 'é'}")) == #"cs_fold(2, t0."name") BETWEEN ? AND ?"#)
        #expect(try Self.compiled(.where("name BETWEEN[d] {'a', 'é'}")).fromWhere().arguments == [.text("a"), .text("e")])
        #expect(try Self.whereSQL(.where("name IN[c] {'A', 'B'}")) == #"cs_fold(1, t0."name") IN (?, ?)"#)
        // On what is not text, an option changes nothing.
        #expect(try Self.whereSQL(.where("age ==[c] 3")) == #"t0."age" IS ?"#)
        // The DSL says the same with a key's options.
        #expect(try Self.whereSQL(%"name"%.caseInsensitive == "ADA") == Self.whereSQL(.where("name ==[c] 'ADA'")))
        #expect(try Self.whereSQL(%"name"%.caseInsensitive.diacriticInsensitive < %"location") == Self.whereSQL(.where("name <[cd] location")))
        #expect(try Self.whereSQL(%"name"%.caseInsensitive.in(["A", "B"])) == Self.whereSQL(.where("name IN[c] {'A', 'B'}")))
        #expect(try Self.whereSQL(%"name"%.caseInsensitive.contains("x")) == Self.whereSQL(.where("name CONTAINS[c] 'x'")))
        #expect(Key("name").caseInsensitive.description == "name[c]")
        // PostgreSQL cannot fold as TextMatch does: fetches filter in memory, aggregates refuse by name.
        let graph = try Model(Person.self, Pet.self).graph
        for condition in [Condition.where("name ==[c] 'x'"), .where("name IN[c] {'x'}"), .where("name BETWEEN[d] {'a', 'b'}")] {
            let postgres = try CompiledQuery(entity: graph.entity(for: Person.self), condition: condition, orderBy: nil, dialect: PostgresDialect())
            #expect(postgres.filtersInMemory)
            #expect { try postgres.requireSQLOnly(for: "an aggregate query") } throws: { ($0 as? QueryError)?.message.contains("name") == true }
            #expect(try !Self.compiled(condition).filtersInMemory)
        }
    }

    @Test func selfIsTheObject() throws {
        let graph = try Model(Person.self, Pet.self).graph
        let person = ObjectID(rootEntity: graph.entity(for: Person.self).rootDescription, primaryKey: 7)
        let pet = ObjectID(rootEntity: graph.entity(for: Pet.self).rootDescription, primaryKey: 7)
        #expect(try Self.whereSQL(.where("SELF == %@", person)) == #"t0."Z_PK" IS ?"#)
        #expect(try Self.whereSQL(.where("SELF != %@", person)) == #"t0."Z_PK" IS NOT ?"#)
        #expect(try Self.whereSQL(.where("SELF IN %@", [person])) == #"t0."Z_PK" IN (?)"#)
        #expect(try Self.whereSQL(.where("friend == SELF")) == #"t0."friend" IS t0."Z_PK""#)
        #expect { try Self.compiled(.where("SELF == %@", pet)) } throws: { ($0 as? QueryError)?.code == .typeMismatch }
        #expect { try Self.compiled(.where("SELF == nil")) } throws: {
            ($0 as? QueryError)?.code == .unsupported && ($0 as? QueryError)?.message.contains("never nil") == true
        }
        #expect { try Self.compiled(.where("SELF > %@", person)) } throws: { ($0 as? QueryError)?.code == .unsupported }
    }

    @Test func valuesOnTheLeftOfInAndContains() throws {
        let graph = try Model(Person.self, Pet.self).graph
        let pet = ObjectID(rootEntity: graph.entity(for: Pet.self).rootDescription, primaryKey: 3)
        let member = #"EXISTS (SELECT 1 FROM "Pet" AS q1_t0 WHERE q1_t0."owner" = t0."Z_PK" AND q1_t0."Z_PK" IS ?)"#
        #expect(try Self.whereSQL(.where("%@ IN pets", pet)) == member)
        #expect(try Self.whereSQL(.where("pets CONTAINS %@", pet)) == member)
        #expect(try Self.whereSQL(.where("ANY pets == %@", pet)) == member)
        #expect(try Self.whereSQL(.where("pets == %@", pet)) == member)
        #expect(try Self.whereSQL(.where("'Rex' IN pets.name")) == #"EXISTS (SELECT 1 FROM "Pet" AS q1_t0 WHERE q1_t0."owner" = t0."Z_PK" AND q1_t0."name" IS ?)"#)
        #expect(try Self.whereSQL(.where("'Rex' IN[c] pets.name")) == #"EXISTS (SELECT 1 FROM "Pet" AS q1_t0 WHERE q1_t0."owner" = t0."Z_PK" AND cs_fold(1, q1_t0."name") IS ?)"#)
        // A string on the right of IN: the left side is a substring of it.
        #expect(try Self.whereSQL(.where("name IN 'Wilhelmina'")) == #"cs_text(?, ?, ?, t0."name")"#)
        #expect(try Self.whereSQL(.where("'Wilhelmina' CONTAINS[c] name")) == Self.whereSQL(.where("name IN[c] 'Wilhelmina'")))
        // Constants on both sides are evaluated, as Apple evaluates them.
        #expect(try Self.whereSQL(.where("%@ > %@", 2, 1)) == "1")
        #expect(try Self.whereSQL(.where("3 IN {1, 2}")) == "0")
        #expect(try Self.whereSQL(.where("'ADA' ==[c] 'ada'")) == "1")
        #expect { try Self.compiled(.where("%@ > %@", nil, 1)) } throws: { ($0 as? QueryError)?.code == .unsupported }
        #expect { try Self.compiled(.where("pets == nil")) } throws: {
            ($0 as? QueryError)?.key == "pets" && ($0 as? QueryError)?.message.contains("@count") == true
        }
    }

    @Test func toManyKeyPathsAskAboutMembers() throws {
        // Without a quantifier, a to-many key path means ANY.
        #expect(try Self.whereSQL(.where("pets.name BEGINSWITH 'R'")) == Self.whereSQL(.where("ANY pets.name BEGINSWITH 'R'")))
        #expect(try Self.whereSQL(%"pets.name" == "Rex") == Self.whereSQL(%"pets.name"%.any == "Rex"))
        // Through two to-many relationships: ALL of ALL, NONE of ANY.
        let all = try Self.whereSQL(.where("ALL friendOf.pets.age > 3"))
        #expect(all == #"(NOT EXISTS (SELECT 1 FROM "Person" AS q1_t0 WHERE q1_t0."friend" = t0."Z_PK" AND ((NOT EXISTS (SELECT 1 FROM "Pet" AS q1_q1_t0 WHERE q1_q1_t0."owner" = q1_t0."Z_PK" AND (q1_q1_t0."age" > ?) IS NOT 1))) IS NOT 1))"#)
        #expect { try Self.compiled(.where("pets.name == friendOf.name")) } throws: { ($0 as? QueryError)?.code == .unsupported }
        // Through to-one hops first: the EXISTS ties the members to the hop's joined row.
        #expect(try Self.compiled(.where("ANY friend.pets.name == 'Rex'")).fromWhere().text ==
                #"FROM "Person" AS t0 LEFT JOIN "Person" AS t1 ON t1."Z_PK" = t0."friend" WHERE EXISTS (SELECT 1 FROM "Pet" AS q1_t0 WHERE q1_t0."owner" = t1."Z_PK" AND q1_t0."name" IS ?)"#)
        #expect(try Self.whereSQL(.where("friend.friend.pets.age > 3")) == #"EXISTS (SELECT 1 FROM "Pet" AS q1_t0 WHERE q1_t0."owner" = t2."Z_PK" AND q1_t0."age" > ?)"#)
        #expect(try Self.whereSQL(%"friend.pets.name"%.all == "Rex") == Self.whereSQL(.where("ALL friend.pets.name == 'Rex'")))
    }

    /// The forms Docs/Predicates.md lists as "not yet" fail with a clear error, not a wrong answer.
    @Test func formsNotYetSupportedFailClearly() throws {
        func code(_ condition: Condition) -> QueryError.Code? {
            do { _ = try Self.compiled(condition); return nil } catch let error as QueryError { return error.code } catch { return nil }
        }
        #expect(code(.where("name ==[n] 'x'")) == .invalidFormat)
        #expect(code(.where("name == %s", "x")) == .invalidFormat)
        #expect(try Self.whereSQL(.where("name BEGINSWITH location")) == #"cs_text(?, ?, t0."name", t0."location")"#)
    }

    @Test func collectionOperatorsAreCorrelatedSubqueries() throws {
        #expect(try Self.whereSQL(.where("pets.@sum.age > 3")) == #"(SELECT coalesce(sum(t0_n."age"), 0) FROM "Pet" AS t0_n WHERE t0_n."owner" = t0."Z_PK") > ?"#)
        #expect(try Self.whereSQL(.where("pets.@avg.age >= age")) == #"(SELECT avg(t0_n."age") FROM "Pet" AS t0_n WHERE t0_n."owner" = t0."Z_PK") >= t0."age""#)
        #expect(try Self.whereSQL(.where("pets.@max.name BEGINSWITH 'R'")) == #"cs_text(?, ?, (SELECT max(t0_n."name") FROM "Pet" AS t0_n WHERE t0_n."owner" = t0."Z_PK"), ?)"#)
        // The DSL reads the same key paths.
        #expect(try Self.whereSQL(%"pets.@min.age" == 2) == #"(SELECT min(t0_n."age") FROM "Pet" AS t0_n WHERE t0_n."owner" = t0."Z_PK") IS ?"#)
        // Through a join table, @count counts links; the others read the members.
        let articles = try CompiledQuery(entity: Model(Article.self, Tag.self).graph.entity(for: Article.self),
                                         condition: .where("tags.@count > 1 AND tags.@max.name == 'z'"), orderBy: nil).fromWhere().text
        #expect(articles.contains(#"(SELECT count(*) FROM "#) && articles.contains(#"(SELECT max(t0_n."name") FROM "Tag" AS t0_n WHERE t0_n."Z_PK" IN (SELECT "#))
        func error(_ condition: Condition) -> QueryError? {
            do { _ = try Self.compiled(condition); return nil } catch { return error as? QueryError }
        }
        #expect(error(.where("pets.@sum.name > 3"))?.message.contains("adds numbers") == true)
        #expect(error(.where("pets.@avg > 3"))?.message.contains("needs a key") == true)
        #expect(error(.where("pets.@median.age > 3"))?.code == .unknownKey)
        #expect(error(.where("pets.@count.age > 3"))?.code == .unsupported)
        #expect(error(.where("friend.pets.@count > 3"))?.code == .unsupported)
        // @min and @max refuse what is not stored in its order; @sum and @avg what is not a number.
        let wallets = try Model(Wallet.self, Banknote.self).graph.entity(for: Wallet.self)
        for format in ["notes.@max.amount > 3", "notes.@min.scan == nil", "notes.@avg.amount > 3"] {
            #expect { try CompiledQuery(entity: wallets, condition: .where(format), orderBy: nil) } throws: {
                ($0 as? QueryError)?.code == .unsupported
            }
        }
        #expect(try CompiledQuery(entity: wallets, condition: .where("notes.@max.serial > 'A'"), orderBy: nil).node != nil)
        // Core Data sorts by attributes and to-one key paths only.
        let graph = try Model(Person.self, Pet.self).graph
        #expect { try CompiledQuery(entity: graph.entity(for: Person.self), condition: nil, orderBy: .ascending("pets.@count")) } throws: {
            ($0 as? QueryError)?.message.contains("Core Data") == true
        }
    }

    @Test func subqueriesCountMatchingMembers() throws {
        #expect(try Self.whereSQL(.where("SUBQUERY(pets, $p, $p.age > 3 AND $p.name BEGINSWITH 'R').@count > 1")) ==
                #"(SELECT count(*) FROM "Pet" AS s1_t0 WHERE s1_t0."owner" = t0."Z_PK" AND (s1_t0."age" > ? AND (s1_t0."name" >= ? AND s1_t0."name" < ?))) > ?"#)
        // The DSL says the same, with the members' keys.
        #expect(try Self.whereSQL(%"pets"%.count(where: %"age" > 3 && %"name"%.beginsWith("R")) > 1) ==
                Self.whereSQL(.where("SUBQUERY(pets, $p, $p.age > 3 AND $p.name BEGINSWITH 'R').@count > 1")))
        // A bare key inside reads the object outside: a correlated reference.
        #expect(try Self.whereSQL(.where("SUBQUERY(pets, $p, $p.age > age).@count == 0")) ==
                #"(SELECT count(*) FROM "Pet" AS s1_t0 WHERE s1_t0."owner" = t0."Z_PK" AND s1_t0."age" > t0."age") IS ?"#)
        // …through the outer object's to-one hops too, which the outer query joins.
        #expect(try Self.whereSQL(.where("SUBQUERY(pets, $p, $p.name == friend.name).@count > 0")) ==
                #"(SELECT count(*) FROM "Pet" AS s1_t0 WHERE s1_t0."owner" = t0."Z_PK" AND s1_t0."name" IS t1."name") > ?"#)
        #expect(try Self.compiled(.where("SUBQUERY(pets, $p, $p.name == friend.name).@count > 0")).fromWhere().text.contains(#"LEFT JOIN "Person" AS t1"#))
        // The member itself, and a value aggregated over the matching members.
        let graph = try Model(Person.self, Pet.self).graph
        let pet = ObjectID(rootEntity: graph.entity(for: Pet.self).rootDescription, primaryKey: 3)
        #expect(try Self.whereSQL(.where("SUBQUERY(pets, $p, $p == %@).@count == 1", pet)) ==
                #"(SELECT count(*) FROM "Pet" AS s1_t0 WHERE s1_t0."owner" = t0."Z_PK" AND s1_t0."Z_PK" IS ?) IS ?"#)
        #expect(try Self.whereSQL(.where("SUBQUERY(pets, $p, $p.age > 1).@sum.age > 4")) ==
                #"(SELECT coalesce(sum(s1_t0."age"), 0) FROM "Pet" AS s1_t0 WHERE s1_t0."owner" = t0."Z_PK" AND s1_t0."age" > ?) > ?"#)
        // Nested: the inner one reads the outer one's member through its variable.
        #expect(try Self.whereSQL(.where("SUBQUERY(friendOf, $f, SUBQUERY($f.pets, $p, $p.age > $f.age).@count > 0).@count > 0")) ==
                #"(SELECT count(*) FROM "Person" AS s1_t0 WHERE s1_t0."friend" = t0."Z_PK" AND (SELECT count(*) FROM "Pet" AS s1_s1_t0 WHERE s1_s1_t0."owner" = s1_t0."Z_PK" AND s1_s1_t0."age" > s1_t0."age") > ?) > ?"#)
        func failure(_ format: String) -> QueryError? {
            do { _ = try Self.compiled(.where(format)); return nil } catch { return error as? QueryError }
        }
        #expect(failure("SUBQUERY(pets, $p, SELF == $p).@count > 0")?.message.contains("SELF inside a SUBQUERY") == true)
        // SUBQUERY is a keyword, `#subquery` a key; `now` is a key unless `()` follows it.
        #expect(failure("subquery > 3")?.code == .invalidFormat)
        #expect(failure("#subquery > 3")?.code == .unknownKey)
        #expect(failure("now > 3")?.code == .unknownKey)
        #expect(failure("SUBQUERY(pets, $p, $p.age > 1) > 0")?.message.contains("@count") == true)
        #expect(failure("SUBQUERY(name, $p, $p.age > 1).@count > 0")?.message.contains("to-many") == true)
        #expect(failure("SUBQUERY(friendOf, $f, SUBQUERY($f.pets, $p, $p.age > age).@count > 0).@count > 0")?.message.contains("two levels") == true)
        #expect(failure("SUBQUERY(pets, $p, ANY $p.owner.pets.age > age).@count > 0")?.code == .unsupported)
    }

    @Test func arithmeticComputesInDouble() throws {
        #expect(try Self.whereSQL(.where("age + 1 > 30")) == #"(CAST(t0."age" AS REAL) + CAST(? AS REAL)) > ?"#)
        #expect(try Self.whereSQL(.where("(age + 1) * 2 >= age ** 2")) ==
                #"(CAST((CAST(t0."age" AS REAL) + CAST(? AS REAL)) AS REAL) * CAST(? AS REAL)) >= cs_pow(t0."age", ?)"#)
        #expect(try Self.whereSQL(.where("age / 0 == nil")) == #"(CAST(t0."age" AS REAL) / NULLIF(CAST(? AS REAL), 0)) IS NULL"#)
        // Constants are computed before the query runs; a value on the left flips the comparison.
        #expect(try Self.compiled(.where("age > 2 * 3 - 1")).fromWhere().arguments == [.double(5)])
        #expect(try Self.whereSQL(.where("2 ** 3 ** 2 == 512")) == "1")
        #expect(try Self.whereSQL(.where("10 < age - 1")) == #"(CAST(t0."age" AS REAL) - CAST(? AS REAL)) > ?"#)
        // Dates: now() is one instant per query; a date plus or minus seconds is a date.
        let before = Date().timeIntervalSince1970
        let arguments = try Self.compiled(.where("now() - 86400 > %@", Date())).fromWhere().arguments
        #expect(arguments.count == 0)
        let query = try CompiledQuery(entity: Model(Sample.self).graph.entity(for: Sample.self), condition: .where("date > now() - 86400"), orderBy: nil)
        let bound = try #require(query.fromWhere().arguments.first?.doubleValue)
        #expect(bound >= before - 86400 && bound <= Date().timeIntervalSince1970 - 86400)
        func failure(_ format: String, _ arguments: any Sendable...) -> QueryError? {
            do { _ = try Self.compiled(.where(format, argumentArray: arguments)); return nil } catch { return error as? QueryError }
        }
        #expect(failure("name + 1 > 3")?.code == .typeMismatch)
        #expect(failure("age + nil > 3")?.code == .unsupported)
        #expect(failure("age + 1 > 'x'")?.code == .typeMismatch)
        #expect(failure("age + {1} > 3")?.code == .invalidFormat)
        // A date minus a date is a number of seconds; a date plus a date is refused.
        let sample = try Model(Sample.self).graph.entity(for: Sample.self)
        let seconds = try CompiledQuery(entity: sample, condition: .where("date - %@ > 3600", Date(timeIntervalSince1970: 0)), orderBy: nil)
        #expect(seconds.fromWhere().text.hasSuffix(#"WHERE (CAST(t0."date" AS REAL) - CAST(? AS REAL)) > ?"#))
        #expect { try CompiledQuery(entity: sample, condition: .where("date - %@ > %@", Date(), Date()), orderBy: nil) } throws: {
            ($0 as? QueryError)?.code == .typeMismatch
        }
        #expect { try CompiledQuery(entity: sample, condition: .where("date + date > 3"), orderBy: nil) } throws: {
            ($0 as? QueryError)?.code == .typeMismatch
        }

        // PostgreSQL's power() refuses what Swift's pow answers, so ** is filtered in memory there.
        let postgres = try CompiledQuery(entity: Model(Person.self, Pet.self).graph.entity(for: Person.self), condition: .where("age ** 2 > 4"), orderBy: nil, dialect: PostgresDialect())
        #expect(postgres.filtersInMemory)
        let sum = try CompiledQuery(entity: Model(Person.self, Pet.self).graph.entity(for: Person.self), condition: .where("age * 2 > 4"), orderBy: nil, dialect: PostgresDialect())
        #expect(!sum.filtersInMemory)
    }

    @Test func variablesAreSubstituted() throws {
        let template = Condition.where("name == $name AND age IN $ages AND location BEGINSWITH[c] $prefix")
        let condition = template.substituting(["name": "Monk", "ages": [18, 21], "prefix": "k"])
        #expect(try Self.whereSQL(condition) == Self.whereSQL(%"name" == "Monk" && %"age"%.in([18, 21]) && %"location"%.beginsWith("k", options: .caseInsensitive)))
        // A substituted `key == value` is what fetchOrCreate needs.
        if case .compare("name", .equal, _) = Condition.where("name == $n").substituting(["n": "Monk"]).node {} else {
            Issue.record("a substituted comparison should be the node the operators build")
        }
        #expect { try Self.compiled(template) } throws: {
            ($0 as? QueryError)?.code == .unsupported && ($0 as? QueryError)?.message.contains("substituting") == true
        }
        struct Opaque: Sendable {}
        #expect { try Self.compiled(Condition.where("name == $n").substituting(["n": Opaque()])) } throws: {
            ($0 as? QueryError)?.code == .invalidFormat
        }
    }

    /// Variables may be items of a list, as in `NSPredicate`: `BETWEEN {$LOW, $HIGH}` and
    /// `IN {'Monk', $OTHER}` take one value for each. Substituted, the condition is the one
    /// written out; without a value (or with a list for an item) it throws when used.
    @Test func variablesInListsAreSubstituted() throws {
        let template = Condition.where("age BETWEEN {$LOW, $HIGH} AND name IN {'Monk', $OTHER}")
        let condition = template.substituting(["LOW": 18, "HIGH": 65, "OTHER": "Abbot"])
        #expect(try Self.whereSQL(condition) == Self.whereSQL(%"age"%.between(18, 65) && %"name"%.in(["Monk", "Abbot"])))
        if case .between("age", _, _) = Condition.where("age BETWEEN {$LOW, $HIGH}").substituting(["LOW": 1, "HIGH": 2]).node {} else {
            Issue.record("a substituted BETWEEN should be the node the operators build")
        }
        let partly = template.substituting(["LOW": 18, "OTHER": "Abbot"])
        #expect { try Self.compiled(partly) } throws: {
            ($0 as? QueryError)?.code == .unsupported && ($0 as? QueryError)?.message.contains("$HIGH") == true
        }
        #expect { try Self.compiled(template.substituting(["LOW": 18, "HIGH": [1, 2], "OTHER": "Abbot"])) } throws: {
            ($0 as? QueryError)?.code == .invalidFormat && ($0 as? QueryError)?.message.contains("$HIGH") == true
        }
    }

    /// Two constants of kinds that do not compare — a string with a number, a date with a
    /// number — throw `.typeMismatch`, as a key and such a value do, in a list wherever they
    /// stand (they were ordered by the store's order of kinds, numbers before text, which made
    /// `'a' > 1` TRUEPREDICATE). Numbers compare with numbers of either kind.
    @Test func constantsOfKindsThatDoNotCompareThrowTypeMismatch() throws {
        for condition in [Condition.where("%@ > %@", "a", 1), .where("%@ == %@", Date(timeIntervalSince1970: 0), 0),
                          .where("%@ BETWEEN {1, 'z'}", 5), .where("%@ IN {1, 'b'}", "b"), .where("%@ IN {'b', 1}", "b")] {
            let error = #expect(throws: QueryError.self, "\(condition)") { try Self.compiled(condition) }
            #expect(error?.code == .typeMismatch, "\(condition)")
        }
        #expect(try Self.whereSQL(.where("%@ > %@", 2, 1.5)) == Self.whereSQL(.all))
        #expect(try Self.whereSQL(.where("%@ == %@", "a", "b")) == Self.whereSQL(.none))
    }

    @Test func surplusArgumentsAreIgnoredAsNSPredicateIgnoresThem() throws {
        #expect(try Self.whereSQL(.where("age > %@", 3, 4)) == Self.whereSQL(%"age" > 3))
        #expect(try Self.whereSQL(.where("age > 3", "x")) == Self.whereSQL(%"age" > 3))
    }

    /// Arithmetic whose result is no number (infinity minus infinity) is nil on every store and
    /// in memory: it matches no comparison and matches `== nil`. PostgreSQL kept the NaN, which
    /// it takes as greater than every number and equal to itself.
    @Test(arguments: StoreKind.available) @MainActor
    func arithmeticThatIsNoNumberIsNilOnEveryStore(kind: StoreKind) throws {
        let store = try TestStore(kind, types: [Sample.self])
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            for (name, double, other) in [("nan", Double.infinity, Double.infinity), ("one", 1, 0), ("zero", 0, .infinity)] {
                let sample = try update.create(Sample.self)
                (sample.string, sample.double, sample.optionalDouble) = (name, double, other)
            }
            try update.commit()
        }
        try store.stack.flushAndWait()
        func names(_ format: String) throws -> [String] {
            try world.fetchAll(Sample.self, .where(format)).map(\.string).sorted()
        }
        #expect(try names("double - optionalDouble > 0") == ["one"])
        #expect(try names("double - optionalDouble == nil") == ["nan"])
        #expect(try names("double * optionalDouble == nil") == ["zero"])
        #expect(try names("double / optionalDouble == nil") == ["nan", "one"])
        // A result past a double's range is infinity, but PostgreSQL throws (Docs/Postgres.md).
        if kind == .postgres {
            let error = #expect(throws: PostgresError.self) { try names("double + 1e308 + 1e308 > 0") }
            #expect(error?.code.rawValue == "22003")
        } else {
            #expect(try names("double + 1e308 + 1e308 > 0") == ["nan", "one", "zero"])
        }
        // Pending changes are evaluated in memory: the same answers.
        try world.beginUpdateAndWait { update in
            for sample in try update.fetchAll(Sample.self) { sample.string += "!" }
            #expect(try update.fetchAll(Sample.self, .where("double - optionalDouble > 0")).map(\.string) == ["one!"])
            #expect(try update.fetchAll(Sample.self, .where("double - optionalDouble == nil")).map(\.string) == ["nan!"])
        }
    }

    /// Collection operators, SUBQUERY and arithmetic on stored objects and on pending changes
    /// (which are evaluated in memory), with the values Docs/Predicates.md promises.
    @Test(arguments: StoreKind.available) @MainActor
    func collectionsSubqueriesAndArithmeticOnEveryStore(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            let monk = try update.create(Person.self)
            (monk.name, monk.age) = ("Monk", 40)
            let ada = try update.create(Person.self)
            (ada.name, ada.age) = ("Ada", 9)
            _ = try update.create(Person.self).name = "Nobody"
            for (name, age) in [("Rex", 3), ("Rio", 5), ("Tom", 4)] {
                let pet = try update.create(Pet.self)
                (pet.name, pet.age, pet.owner) = (name, age, monk)
            }
            let pet = try update.create(Pet.self)
            (pet.name, pet.age, pet.owner) = ("Rex", 1, ada)
            try update.commit()
        }
        func names(_ format: String, _ arguments: any Sendable...) throws -> [String] {
            try world.fetchAll(Person.self, .where(format, argumentArray: arguments)).map(\.name).sorted()
        }
        #expect(try names("pets.@sum.age == 12") == ["Monk"])
        #expect(try names("pets.@sum.age == 0") == ["Nobody"]) // the sum of no members is 0
        #expect(try names("pets.@avg.age == 4") == ["Monk"])
        #expect(try names("pets.@avg.age == nil") == ["Nobody"]) // …and their average is nil
        #expect(try names("pets.@min.age < 2 OR pets.@max.name == 'Tom'") == ["Ada", "Monk"])
        #expect(try names("SUBQUERY(pets, $p, $p.age > 3 AND $p.name BEGINSWITH 'R').@count == 1") == ["Monk"])
        #expect(try names("SUBQUERY(pets, $p, $p.age * 10 > age).@count > 0") == ["Ada", "Monk"])
        #expect(try world.fetchAll(Person.self, %"pets"%.count(where: %"age" > 3) == 2).map(\.name) == ["Monk"])
        #expect(try names("age / 0 == nil AND age * 2 + 1 == 19") == ["Ada"])
        #expect(try names("2 ** (age / 10) > 15") == ["Monk"])
        // Pending changes are evaluated in memory, with the same meaning.
        try world.beginUpdateAndWait { update in
            let ada = try #require(try update.fetch(Person.self, %"name" == "Ada"))
            let pet = try update.create(Pet.self)
            (pet.name, pet.age, pet.owner) = ("Rita", 7, ada)
            #expect(try update.fetchAll(Person.self, .where("SUBQUERY(pets, $p, $p.name BEGINSWITH 'R').@count == 2")).map(\.name).sorted() == ["Ada", "Monk"])
            #expect(try update.fetchAll(Person.self, .where("pets.@sum.age == 8 AND pets.@avg.age == 4")).map(\.name) == ["Ada"])
            // A sum beyond Int64 fails on both paths rather than wrapping.
            pet.age = .max
            #expect(throws: (any Error).self) { try update.fetchAll(Person.self, .where("pets.@sum.age > 0")) }
            try update.commit()
        }
        #expect(throws: (any Error).self) { try world.fetchAll(Person.self, .where("pets.@sum.age > 0")) }
    }

    @Test(arguments: StoreKind.available) @MainActor
    func likeEscapesMakeWildcardsLiteral(kind: StoreKind) throws {
        let store = try TestStore(kind)
        let world = try MainContext(stack: store.stack)
        try world.beginUpdateAndWait { update in
            for name in ["a*b", "axb", "a?b", "a\\b", "ab"] { try update.create(Person.self).name = name }
            try update.commit()
        }
        func names(_ condition: Condition) throws -> [String] { try world.fetchAll(Person.self, condition).map(\.name).sorted() }
        #expect(try names(.where(#"name LIKE 'a\\*b'"#)) == ["a*b"])
        #expect(try names(%"name"%.like(#"a\?b"#)) == ["a?b"])
        #expect(try names(%"name"%.like(#"a\\b"#)) == [#"a\b"#])
        #expect(try names(%"name"%.like("a*b")) == ["a*b", "a?b", #"a\b"#, "ab", "axb"])
    }
}

/// Members whose attributes are not stored in their order, for the collection operators' checks.
@Entity final class Wallet: ManagedObject {
    @Relationship(inverse: \Banknote.wallet) var notes: Set<Banknote>
}

@Entity final class Banknote: ManagedObject {
    var serial: String = ""
    var amount: Decimal = 0
    var scan: Data = Data()
    @Relationship var wallet: Wallet?
}

import ContextStack
import Foundation
import Hummingbird

extension Person.Snapshot: ResponseEncodable {}
extension Pet.Snapshot: ResponseEncodable {}

/// The JSON API over people and pets. Every handler is an `async` function on Swift's
/// cooperative pool: reads await snapshots (values, served by the store's reader pool on the
/// library's own threads), writes await `transaction`s (durable when they return). No managed
/// object ever leaves a transaction.
struct PeopleAPI: Sendable {
    let context: Context

    func register(on router: Router<APIContext>) {
        router.get("people", use: list)
        router.post("people", use: create)
        router.get("people/:id", use: get)
        router.patch("people/:id", use: patch)
        router.delete("people/:id", use: delete)
        router.get("people/:id/pets", use: pets)
        router.post("people/:id/pets", use: addPet)
        router.get("stats", use: stats)
    }

    // MARK: Reads

    /// One page of people, with the number of people matching the filters.
    struct Page: ResponseEncodable {
        let items: [Person.Snapshot]
        let total: Int
    }

    /// `GET /people?minAge=18&maxAge=65&city=Kyoto&name=An&limit=50&offset=0`, ordered by name.
    @Sendable func list(_ request: Request, _ http: APIContext) async throws -> Page {
        let query = request.uri.queryParameters
        var filters: [Condition] = []
        if let minAge = query.get("minAge", as: Int.self) { filters.append(%"age" >= minAge) }
        if let maxAge = query.get("maxAge", as: Int.self) { filters.append(%"age" <= maxAge) }
        if let city = query.get("city") { filters.append(%"city" == city) }
        if let prefix = query.get("name") { filters.append((%"name").beginsWith(prefix)) }
        let condition = filters.dropFirst().reduce(filters.first) { all, next in all.map { $0 && next } }
        let limit = min(max(query.get("limit", as: Int.self) ?? 50, 0), 500)
        let offset = max(query.get("offset", as: Int.self) ?? 0, 0)
        async let items = context.snapshots(Person.self, condition, orderBy: .ascending("name") | .ascending("age"),
                                            options: .limit(limit) | .offset(offset))
        async let total = context.count(Person.self, condition)
        return try await Page(items: items, total: total)
    }

    /// `GET /people/12`.
    @Sendable func get(_ request: Request, _ http: APIContext) async throws -> Person.Snapshot {
        let id = try personID(http)
        guard let person = try await context.snapshot(Person.self, id: id) else { throw HTTPError(.notFound, message: "No person \(id).") }
        return person
    }

    /// `GET /people/12/pets`.
    @Sendable func pets(_ request: Request, _ http: APIContext) async throws -> [Pet.Snapshot] {
        let id = try personID(http)
        guard let owner = try await context.snapshot(Person.self, id: id) else { throw HTTPError(.notFound, message: "No person \(id).") }
        return try await context.snapshots(Pet.self, %"owner" == owner.id, orderBy: .ascending("name"))
    }

    struct Stats: ResponseEncodable {
        let people: Int
        let pets: Int
        let averageAge: Double?
    }

    /// `GET /stats`: counts and an aggregate, read off the main actor.
    @Sendable func stats(_ request: Request, _ http: APIContext) async throws -> Stats {
        async let people = context.count(Person.self)
        async let pets = context.count(Pet.self)
        async let average = context.aggregateValue(Person.self, .average("age"))
        return try await Stats(people: people, pets: pets, averageAge: average.doubleValue)
    }

    // MARK: Writes

    struct NewPerson: Decodable, Sendable {
        let name: String
        let age: Int
        let city: String?
        let email: String?
    }

    /// `POST /people` `{"name": "Ann", "age": 30, "city": "Kyoto", "email": "ann@example.org"}`:
    /// 201 with the stored person; 409 when the email is taken.
    @Sendable func create(_ request: Request, _ http: APIContext) async throws -> EditedResponse<Person.Snapshot> {
        let input = try await request.decode(as: NewPerson.self, context: http)
        guard !input.name.isEmpty, input.age >= 0 else { throw HTTPError(.badRequest, message: "A person needs a name and an age of 0 or more.") }
        do {
            let person = try await context.transaction { update in
                let person = try update.create(Person.self)
                person.name = input.name
                person.age = input.age
                person.city = input.city
                person.email = input.email
                return person.snapshot
            }
            return EditedResponse(status: .created, headers: [.location: "/people/\(person.id.primaryKey)"], response: person)
        } catch let error as SaveError where error.code == .uniquenessViolated {
            throw HTTPError(.conflict, message: "The email \(input.email ?? "") belongs to someone else.")
        }
    }

    /// What a client sends to change a person: the person as it read them, and as it wants
    /// them. The change is refused with 409 if anyone changed the person in between.
    struct Edit: Decodable, Sendable {
        let expected: Person.Snapshot
        let edited: Person.Snapshot
    }

    /// `PATCH /people/12` `{"expected": {…as read…}, "edited": {…as wanted…}}`: 200 with the
    /// stored person, 409 with the conflicts and the current person on a lost update, 409 when
    /// the new email is someone else's, 422 when `edited` names pets that do not exist, 404
    /// when the person is gone, 400 without a name or with a negative age.
    @Sendable func patch(_ request: Request, _ http: APIContext) async throws -> Response {
        let id = try personID(http)
        let edit = try await request.decode(as: Edit.self, context: http)
        guard edit.expected.id == id, edit.edited.id == id else {
            throw HTTPError(.badRequest, message: "'expected' and 'edited' must both be \(id).")
        }
        guard !edit.edited.name.isEmpty, edit.edited.age >= 0 else { throw HTTPError(.badRequest, message: "A person needs a name and an age of 0 or more.") }
        do {
            let stored = try await context.transaction { update in
                try update.apply(edit.edited, expecting: edit.expected)
                return try update.fetch(Person.self, id: id)!.snapshot
            }
            return try json(stored, status: .ok)
        } catch let error as SaveError where error.code == .uniquenessViolated {
            throw HTTPError(.conflict, message: "The email \(edit.edited.email ?? "") belongs to someone else.")
        } catch let error as SaveError where error.code == .relatesToDeletedObject {
            // A DELETE saved between `apply` and the write: of the person (a change of pets
            // alone writes only the pets' rows), or of a pet it names.
            guard try await context.snapshot(Person.self, id: id) != nil else { throw HTTPError(.notFound, message: "No person \(id).") }
            throw HTTPError(.unprocessableContent, message: "No such objects: \(error.objects.map(\.description).joined(separator: ", ")).")
        } catch let conflict as MergeConflictError {
            guard let current = try await context.snapshot(Person.self, id: id) else {
                throw HTTPError(.notFound, message: "No person \(id).")
            }
            // `apply` reports an object a relationship names that does not exist as a conflict
            // on that relationship with nothing expected or stored: the request is wrong, and
            // reading the person again would not help.
            let missing = conflict.conflicts.filter { $0.key != "<deleted>" && $0.snapshot == .null && $0.stored == .null }
            if !missing.isEmpty {
                throw HTTPError(.unprocessableContent, message: "No such objects: \(missing.map { "\($0.ours)" }.joined(separator: ", ")).")
            }
            let report = ConflictReport(
                error: "The person changed since you read them: read them again and reapply your change.",
                conflicts: conflict.conflicts.map { .init(key: $0.key, expected: "\($0.snapshot)", stored: "\($0.stored)") },
                current: current)
            return try json(report, status: .conflict)
        }
    }

    struct ConflictReport: Encodable {
        struct Item: Encodable {
            let key: String
            let expected: String
            let stored: String
        }
        let error: String
        let conflicts: [Item]
        let current: Person.Snapshot
    }

    /// `DELETE /people/12`: 204, or 404 when there is no such person. Their pets go with them.
    @Sendable func delete(_ request: Request, _ http: APIContext) async throws -> HTTPResponse.Status {
        let id = try personID(http)
        let deleted = try await context.transaction { update in
            guard let person = try update.fetch(Person.self, id: id) else { return false }
            try update.delete(person)
            return true
        }
        guard deleted else { throw HTTPError(.notFound, message: "No person \(id).") }
        return .noContent
    }

    struct NewPet: Decodable, Sendable {
        let name: String
        let species: String
    }

    /// `POST /people/12/pets` `{"name": "Rex", "species": "dog"}`: 201 with the pet, 404 when
    /// the person is gone (also when a `DELETE` of them is saved first).
    @Sendable func addPet(_ request: Request, _ http: APIContext) async throws -> EditedResponse<Pet.Snapshot> {
        let id = try personID(http)
        let input = try await request.decode(as: NewPet.self, context: http)
        let pet: Pet.Snapshot?
        do {
            pet = try await context.transaction { update -> Pet.Snapshot? in
                guard let owner = try update.fetch(Person.self, id: id) else { return nil }
                let pet = try update.create(Pet.self)
                pet.name = input.name
                pet.species = input.species
                pet.owner = owner
                return pet.snapshot
            }
        } catch let error as SaveError where error.code == .relatesToDeletedObject {
            pet = nil
        }
        guard let pet else { throw HTTPError(.notFound, message: "No person \(id).") }
        return EditedResponse(status: .created, response: pet)
    }

    // MARK: Helpers

    /// The person a path's `:id` names: `/people/12` is `Person/12`.
    private func personID(_ http: APIContext) throws -> ObjectID {
        let key = try http.parameters.require("id", as: Int64.self)
        guard let id = ObjectID("Person/\(key)") else { throw HTTPError(.notFound) }
        return id
    }

    private func json(_ value: some Encodable, status: HTTPResponse.Status) throws -> Response {
        let data = try APIContext.encoder().encode(value)
        return Response(status: status, headers: [.contentType: "application/json; charset=utf-8"],
                        body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
    }
}

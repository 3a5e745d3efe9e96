import _ContextStackCore

/// Typed predicates: key paths of an entity instead of key strings, checked by the compiler.
///
/// For example:
///
/// ```swift
/// try world.fetchAll(Person.self, \Person.age > 18 && \Person.name != "Monk",
///                    orderBy: .ascending(\Person.name))
/// ```
///
/// A key path must name a persisted property of the entity directly (`\Person.age`); for a
/// path through a relationship use a key string (`%"friend.age"`).
extension KeyPath where Root: ManagedObject {
    /// The key this key path names, or a `Condition` that throws when used.
    var conditionKey: Result<Key, QueryError> {
        guard let name = Root._cs_key(for: self) else {
            return .failure(QueryError(.unknownKey, "The key path \(self) does not name a persisted property of \(Root.self): typed predicates take a property of the entity itself (\\\(Root.self).name); write a path through a relationship as a string (%\"friend.age\").", entity: "\(Root.self)"))
        }
        return .success(Key(name))
    }

    fileprivate func condition(_ build: (Key) -> Condition) -> Condition {
        switch conditionKey {
        case .success(let key): build(key)
        case .failure(let error): Condition(.invalid(error))
        }
    }
}

public func == <Root: ManagedObject, V: AttributeValue>(lhs: KeyPath<Root, V>, rhs: V) -> Condition { lhs.condition { $0 == rhs } }
public func != <Root: ManagedObject, V: AttributeValue>(lhs: KeyPath<Root, V>, rhs: V) -> Condition { lhs.condition { $0 != rhs } }
public func < <Root: ManagedObject, V: AttributeValue>(lhs: KeyPath<Root, V>, rhs: V) -> Condition { lhs.condition { $0 < rhs } }
public func <= <Root: ManagedObject, V: AttributeValue>(lhs: KeyPath<Root, V>, rhs: V) -> Condition { lhs.condition { $0 <= rhs } }
public func > <Root: ManagedObject, V: AttributeValue>(lhs: KeyPath<Root, V>, rhs: V) -> Condition { lhs.condition { $0 > rhs } }
public func >= <Root: ManagedObject, V: AttributeValue>(lhs: KeyPath<Root, V>, rhs: V) -> Condition { lhs.condition { $0 >= rhs } }

/// A to-one relationship against an object: `\Person.friend == knight`.
public func == <Root: ManagedObject, V: ManagedObject>(lhs: KeyPath<Root, V?>, rhs: V?) -> Condition { lhs.condition { $0 == rhs } }
public func != <Root: ManagedObject, V: ManagedObject>(lhs: KeyPath<Root, V?>, rhs: V?) -> Condition { lhs.condition { $0 != rhs } }

extension OrderBy {
    /// Ascending by a property: `.ascending(\Person.name)`.
    public static func ascending<Root: ManagedObject, V>(_ keyPath: KeyPath<Root, V>) -> OrderBy {
        term(keyPath, ascending: true)
    }

    /// Descending by a property: `.descending(\Person.age)`.
    public static func descending<Root: ManagedObject, V>(_ keyPath: KeyPath<Root, V>) -> OrderBy {
        term(keyPath, ascending: false)
    }

    private static func term<Root: ManagedObject, V>(_ keyPath: KeyPath<Root, V>, ascending: Bool) -> OrderBy {
        switch keyPath.conditionKey {
        case .success(let key): return OrderBy(terms: [Term(key: key.path, ascending: ascending)])
        case .failure(let error): return OrderBy(terms: [Term(key: "\(keyPath)", ascending: ascending, invalid: error)])
        }
    }
}

//! Roles, users, identities, GRANT / REVOKE / LIST.

use super::{PResult, Parser};
use crate::ast::*;
use crate::error::ParseErrorKind;
use crate::keyword::Keyword;
use crate::lexer::Tok;

impl<'a> Parser<'a> {
    /// `roleName`: IDENT, STRING_LITERAL, QUOTED_NAME or an unreserved keyword.
    pub(crate) fn role_name(&mut self) -> PResult<Ident> {
        if self.at(Tok::Str) {
            return Ok(Ident::quoted(self.string_literal()?));
        }
        self.schema_ident("role")
    }

    /// `username`: IDENT or STRING_LITERAL.
    pub(crate) fn username(&mut self) -> PResult<Ident> {
        match self.peek() {
            Tok::Str => Ok(Ident::quoted(self.string_literal()?)),
            Tok::Ident => {
                let t = self.bump();
                Ok(self.ident_from(t))
            }
            Tok::QuotedName => Err(self.recognition(
                ParseErrorKind::Recognition,
                "Quoted strings are are not supported for user names and USER is deprecated, please use ROLE",
            )),
            _ => Err(self.no_viable()),
        }
    }

    /// `identity`: IDENT or STRING_LITERAL, kept as written.
    pub(crate) fn identity(&mut self) -> PResult<String> {
        match self.peek() {
            Tok::Str => self.string_literal(),
            Tok::Ident => {
                let t = self.bump();
                Ok(self.text(t).to_string())
            }
            Tok::QuotedName => Err(self.recognition(
                ParseErrorKind::Recognition,
                "Quoted strings are are not supported for identity",
            )),
            _ => Err(self.no_viable()),
        }
    }

    /// `createRoleStatement` (after CREATE).
    pub(crate) fn create_role(&mut self) -> PResult<CreateRole> {
        self.bump();
        let if_not_exists = self.if_not_exists()?;
        let name = self.role_name()?;
        let options = if self.eat_kw(Keyword::With) {
            self.role_options()?
        } else {
            Vec::new()
        };
        Ok(CreateRole {
            name,
            if_not_exists,
            options,
        })
    }

    /// `alterRoleStatement` (after ALTER).
    pub(crate) fn alter_role(&mut self) -> PResult<AlterRole> {
        self.bump();
        let if_exists = self.if_exists()?;
        let name = self.role_name()?;
        let options = if self.eat_kw(Keyword::With) {
            self.role_options()?
        } else {
            Vec::new()
        };
        Ok(AlterRole {
            name,
            if_exists,
            options,
        })
    }

    /// `createUserStatement` (after CREATE).
    pub(crate) fn create_user(&mut self) -> PResult<UserStatement> {
        self.bump();
        let if_clause = self.if_not_exists()?;
        self.user_rest(if_clause)
    }

    /// `alterUserStatement` (after ALTER).
    pub(crate) fn alter_user(&mut self) -> PResult<UserStatement> {
        self.bump();
        let if_clause = self.if_exists()?;
        self.user_rest(if_clause)
    }

    fn user_rest(&mut self, if_clause: bool) -> PResult<UserStatement> {
        let name = self.username()?;
        let mut options = Vec::new();
        if self.eat_kw(Keyword::With) {
            // `userPassword`: no '=' here, for backwards compatibility.
            if self.eat_kw(Keyword::Password) {
                options.push(RoleOption::Password(self.string_literal()?));
            } else if self.eat_kw(Keyword::Hashed) {
                self.expect_kw(Keyword::Password)?;
                options.push(RoleOption::HashedPassword(self.string_literal()?));
            } else if self.eat_kw(Keyword::Generated) {
                self.expect_kw(Keyword::Password)?;
                options.push(RoleOption::GeneratedPassword);
            } else {
                return Err(self.no_viable());
            }
        }
        if self.eat_kw(Keyword::Superuser) {
            options.push(RoleOption::Superuser(true));
        } else if self.eat_kw(Keyword::Nosuperuser) {
            options.push(RoleOption::Superuser(false));
        }
        Ok(UserStatement {
            name,
            if_clause,
            options,
        })
    }

    /// `roleOptions`.
    fn role_options(&mut self) -> PResult<Vec<RoleOption>> {
        let mut out = Vec::new();
        loop {
            out.push(self.role_option()?);
            if !self.eat_kw(Keyword::And) {
                return Ok(out);
            }
        }
    }

    fn boolean(&mut self) -> PResult<bool> {
        let t = self.expect(Tok::Boolean)?;
        Ok(self.text(t).eq_ignore_ascii_case("true"))
    }

    /// `{'a', 'b'}` of string literals.
    fn string_set(&mut self) -> PResult<Vec<String>> {
        self.expect(Tok::LBrace)?;
        let mut out = vec![self.string_literal()?];
        while self.eat(Tok::Comma) {
            out.push(self.string_literal()?);
        }
        self.expect(Tok::RBrace)?;
        Ok(out)
    }

    /// `roleOption`.
    fn role_option(&mut self) -> PResult<RoleOption> {
        let Tok::Keyword(k) = self.peek() else {
            return Err(self.no_viable());
        };
        self.bump();
        Ok(match k {
            Keyword::Password => {
                self.expect(Tok::Eq)?;
                RoleOption::Password(self.string_literal()?)
            }
            Keyword::Generated => {
                self.expect_kw(Keyword::Password)?;
                RoleOption::GeneratedPassword
            }
            Keyword::Hashed => {
                self.expect_kw(Keyword::Password)?;
                self.expect(Tok::Eq)?;
                RoleOption::HashedPassword(self.string_literal()?)
            }
            Keyword::Options => {
                self.expect(Tok::Eq)?;
                RoleOption::Options(self.property_map()?)
            }
            Keyword::Superuser => {
                self.expect(Tok::Eq)?;
                RoleOption::Superuser(self.boolean()?)
            }
            Keyword::Login => {
                self.expect(Tok::Eq)?;
                RoleOption::Login(self.boolean()?)
            }
            Keyword::Access if self.eat_kw(Keyword::To) => {
                if self.eat_kw(Keyword::All) {
                    self.expect_kw(Keyword::Datacenters)?;
                    RoleOption::AccessToDatacenters(None)
                } else {
                    self.expect_kw(Keyword::Datacenters)?;
                    RoleOption::AccessToDatacenters(Some(self.string_set()?))
                }
            }
            Keyword::Access if self.eat_kw(Keyword::From) => {
                if self.eat_kw(Keyword::All) {
                    self.expect_kw(Keyword::Cidrs)?;
                    RoleOption::AccessFromCidrs(None)
                } else {
                    self.expect_kw(Keyword::Cidrs)?;
                    RoleOption::AccessFromCidrs(Some(self.string_set()?))
                }
            }
            _ => {
                self.pos -= 1;
                return Err(self.no_viable());
            }
        })
    }

    fn permission_keyword(t: Tok) -> Option<Permission> {
        let Tok::Keyword(k) = t else { return None };
        Some(match k {
            Keyword::Create => Permission::Create,
            Keyword::Alter => Permission::Alter,
            Keyword::Drop => Permission::Drop,
            Keyword::Select => Permission::Select,
            Keyword::Modify => Permission::Modify,
            Keyword::Authorize => Permission::Authorize,
            Keyword::Describe => Permission::Describe,
            Keyword::Execute => Permission::Execute,
            Keyword::Unmask => Permission::Unmask,
            Keyword::SelectMasked => Permission::SelectMasked,
            _ => return None,
        })
    }

    fn at_permissions(&self) -> bool {
        Self::permission_keyword(self.peek()).is_some()
            || (self.at_kw(Keyword::All)
                && matches!(
                    self.peek_n(1),
                    Tok::Keyword(
                        Keyword::On | Keyword::Permissions | Keyword::Of | Keyword::Norecursive
                    ) | Tok::Eof
                ))
    }

    /// `permissionOrAll`: `None` for ALL.
    fn permissions(&mut self) -> PResult<Option<Vec<Permission>>> {
        if self.eat_kw(Keyword::All) {
            self.eat_kw(Keyword::Permissions);
            return Ok(None);
        }
        let mut out = Vec::new();
        loop {
            match Self::permission_keyword(self.peek()) {
                Some(p) => {
                    self.bump();
                    out.push(p);
                }
                None => return Err(self.no_viable()),
            }
            self.eat_kw(Keyword::Permission);
            if !self.eat(Tok::Comma) {
                return Ok(Some(out));
            }
        }
    }

    /// `resource`.
    fn resource(&mut self) -> PResult<Resource> {
        if self.at_kw(Keyword::All) {
            match self.peek_n(1) {
                Tok::Keyword(Keyword::Keyspaces) => {
                    self.pos += 2;
                    return Ok(Resource::AllKeyspaces);
                }
                Tok::Keyword(Keyword::Tables) => {
                    self.pos += 2;
                    self.expect_kw(Keyword::In)?;
                    self.expect_kw(Keyword::Keyspace)?;
                    return Ok(Resource::AllTablesInKeyspace(self.keyspace_name()?));
                }
                Tok::Keyword(Keyword::Roles) => {
                    self.pos += 2;
                    return Ok(Resource::AllRoles);
                }
                Tok::Keyword(Keyword::Functions) => {
                    self.pos += 2;
                    if self.eat_kw(Keyword::In) {
                        self.expect_kw(Keyword::Keyspace)?;
                        return Ok(Resource::AllFunctionsInKeyspace(self.keyspace_name()?));
                    }
                    return Ok(Resource::AllFunctions);
                }
                Tok::Keyword(Keyword::Mbeans) => {
                    self.pos += 2;
                    return Ok(Resource::AllMbeans);
                }
                _ => {}
            }
        }
        let next_is_name = matches!(self.peek_n(1), Tok::Ident | Tok::QuotedName | Tok::Str)
            || matches!(self.peek_n(1), Tok::Keyword(k) if k.is_unreserved());
        match self.peek() {
            Tok::Keyword(Keyword::Keyspace) => {
                self.bump();
                Ok(Resource::Keyspace(self.keyspace_name()?))
            }
            Tok::Keyword(Keyword::Role) if next_is_name => {
                self.bump();
                Ok(Resource::Role(self.role_name()?))
            }
            Tok::Keyword(Keyword::Function) if next_is_name => {
                self.bump();
                let name = self.function_name()?;
                self.expect(Tok::LParen)?;
                let mut arg_types = Vec::new();
                if !self.eat(Tok::RParen) {
                    loop {
                        arg_types.push(self.type_expr()?);
                        if !self.eat(Tok::Comma) {
                            break;
                        }
                    }
                    self.expect(Tok::RParen)?;
                }
                Ok(Resource::Function { name, arg_types })
            }
            Tok::Keyword(Keyword::Mbean) if self.peek_n(1) == Tok::Str => {
                self.bump();
                Ok(Resource::Mbean(self.string_literal()?))
            }
            Tok::Keyword(Keyword::Mbeans) if self.peek_n(1) == Tok::Str => {
                self.bump();
                Ok(Resource::Mbeans(self.string_literal()?))
            }
            _ => {
                self.eat_kw(Keyword::Table);
                Ok(Resource::Table(self.table_name()?))
            }
        }
    }

    /// Cassandra's `filterPermissions`: keeps the permissions that apply to the resource;
    /// none applying is an error.
    fn filter_permissions(
        &self,
        permissions: Option<Vec<Permission>>,
        resource: &Resource,
    ) -> PResult<Option<Vec<Permission>>> {
        use Permission::*;
        let (kind, applicable): (&str, &[Permission]) = match resource {
            Resource::AllKeyspaces | Resource::Keyspace(_) | Resource::AllTablesInKeyspace(_) => (
                "DataResource",
                &[
                    Create,
                    Alter,
                    Drop,
                    Select,
                    Modify,
                    Authorize,
                    Unmask,
                    SelectMasked,
                ],
            ),
            Resource::Table(_) => (
                "DataResource",
                &[Alter, Drop, Select, Modify, Authorize, Unmask, SelectMasked],
            ),
            Resource::AllRoles => ("RoleResource", &[Create, Alter, Drop, Authorize, Describe]),
            Resource::Role(_) => ("RoleResource", &[Alter, Drop, Authorize]),
            Resource::AllFunctions | Resource::AllFunctionsInKeyspace(_) => (
                "FunctionResource",
                &[Create, Alter, Drop, Authorize, Execute],
            ),
            Resource::Function { .. } => ("FunctionResource", &[Alter, Drop, Authorize, Execute]),
            Resource::AllMbeans | Resource::Mbean(_) | Resource::Mbeans(_) => (
                "JMXResource",
                &[Authorize, Describe, Execute, Modify, Select],
            ),
        };
        let Some(ps) = permissions else {
            return Ok(None);
        };
        let kept: Vec<Permission> = ps.into_iter().filter(|p| applicable.contains(p)).collect();
        if kept.is_empty() {
            return Err(self.recognition(
                ParseErrorKind::Recognition,
                format!("Resource type {kind} does not support any of the requested permissions"),
            ));
        }
        Ok(Some(kept))
    }

    /// GRANT / REVOKE of permissions or roles.
    pub(crate) fn grant_revoke_statement(&mut self) -> PResult<Statement> {
        let grant = self.bump().tok == Tok::Keyword(Keyword::Grant);
        let link = if grant { Keyword::To } else { Keyword::From };
        if self.at_permissions() {
            let permissions = self.permissions()?;
            self.expect_kw(Keyword::On)?;
            let resource = self.resource()?;
            let permissions = self.filter_permissions(permissions, &resource)?;
            self.expect_kw(link)?;
            let role = self.role_name()?;
            let s = PermissionsStatement {
                permissions,
                resource,
                role,
            };
            return Ok(if grant {
                Statement::GrantPermissions(s)
            } else {
                Statement::RevokePermissions(s)
            });
        }
        let role = self.role_name()?;
        self.expect_kw(link)?;
        let other = self.role_name()?;
        Ok(if grant {
            Statement::GrantRole {
                role,
                grantee: other,
            }
        } else {
            Statement::RevokeRole {
                role,
                revokee: other,
            }
        })
    }

    /// LIST ROLES | USERS | SUPERUSERS | permissions.
    pub(crate) fn list_statement(&mut self) -> PResult<Statement> {
        self.expect_kw(Keyword::List)?;
        if self.eat_kw(Keyword::Roles) {
            let of = if self.eat_kw(Keyword::Of) {
                Some(self.role_name()?)
            } else {
                None
            };
            let recursive = !self.eat_kw(Keyword::Norecursive);
            return Ok(Statement::ListRoles { of, recursive });
        }
        if self.eat_kw(Keyword::Users) {
            return Ok(Statement::ListUsers);
        }
        if self.eat_kw(Keyword::Superusers) {
            return Ok(Statement::ListSuperUsers);
        }
        let permissions = self.permissions()?;
        let resource = if self.eat_kw(Keyword::On) {
            Some(self.resource()?)
        } else {
            None
        };
        let of = if self.eat_kw(Keyword::Of) {
            Some(self.role_name()?)
        } else {
            None
        };
        let recursive = !self.eat_kw(Keyword::Norecursive);
        Ok(Statement::ListPermissions(ListPermissions {
            permissions,
            resource,
            of,
            recursive,
        }))
    }

    /// `ADD IDENTITY [IF NOT EXISTS] 'id' TO ROLE 'role'`.
    pub(crate) fn add_identity_statement(&mut self) -> PResult<Statement> {
        self.expect_kw(Keyword::Add)?;
        self.expect_kw(Keyword::Identity)?;
        let if_not_exists = self.if_not_exists()?;
        let identity = self.identity()?;
        self.expect_kw(Keyword::To)?;
        self.expect_kw(Keyword::Role)?;
        let role = self.identity()?;
        Ok(Statement::AddIdentity {
            identity,
            role,
            if_not_exists,
        })
    }
}

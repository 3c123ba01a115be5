//! Values between lockctl and the database: the SKU bound with the type its parameter has,
//! UUIDs as PostgreSQL sends them, and integers and texts read back from either database.

use super::SkuParam;
use crate::error::{BadValue, SqlError};
use lockctl_hammer::http::ids::IdFormat;

impl SkuParam<'_> {
    /// The SKU as PostgreSQL's parameter of type `ty`.
    pub(super) fn pg(
        &self,
        ty: Option<&postgres::types::Type>,
    ) -> Result<Box<dyn postgres::types::ToSql + Sync>, SqlError> {
        use postgres::types::Type;
        let number = || -> Result<i64, SqlError> {
            self.text.parse().map_err(|_| SqlError::SkuNotNumber {
                sku: self.text.to_string(),
                ty: ty.map_or("integer".into(), |t| t.to_string()),
            })
        };
        let out_of = |ty: &'static str| SqlError::SkuTooLarge {
            sku: self.text.to_string(),
            ty,
        };
        Ok(match ty {
            Some(t) if *t == Type::INT8 => Box::new(number()?),
            Some(t) if *t == Type::INT4 => {
                Box::new(i32::try_from(number()?).map_err(|_| out_of("int4"))?)
            }
            Some(t) if *t == Type::INT2 => {
                Box::new(i16::try_from(number()?).map_err(|_| out_of("int2"))?)
            }
            Some(t) if *t == Type::UUID => {
                Box::new(
                    PgUuid::parse(self.text).ok_or_else(|| SqlError::SkuNotUuid {
                        sku: self.text.to_string(),
                    })?,
                )
            }
            _ => Box::new(self.text.to_string()),
        })
    }

    /// The SKU as MySQL's parameter.
    pub(super) fn my(&self) -> mysql::Value {
        match (self.format, self.text.parse::<i64>()) {
            (IdFormat::Int, Ok(n)) => mysql::Value::Int(n),
            _ => mysql::Value::Bytes(self.text.as_bytes().to_vec()),
        }
    }
}

/// A UUID as PostgreSQL sends and takes it: 16 bytes.
#[derive(Debug)]
struct PgUuid([u8; 16]);

impl PgUuid {
    fn parse(text: &str) -> Option<PgUuid> {
        if !lockctl_hammer::http::ids::is_uuid(text) {
            return None;
        }
        let mut b = [0u8; 16];
        hex::decode_to_slice(text.replace('-', ""), &mut b).ok()?;
        Some(PgUuid(b))
    }
}

impl postgres::types::ToSql for PgUuid {
    fn to_sql(
        &self,
        _: &postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(&self.0);
        Ok(postgres::types::IsNull::No)
    }

    fn accepts(ty: &postgres::types::Type) -> bool {
        *ty == postgres::types::Type::UUID
    }

    postgres::types::to_sql_checked!();
}

impl<'a> postgres::types::FromSql<'a> for PgUuid {
    fn from_sql(
        _: &postgres::types::Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(PgUuid(raw.try_into()?))
    }

    fn accepts(ty: &postgres::types::Type) -> bool {
        *ty == postgres::types::Type::UUID
    }
}

pub(super) fn pg_integer(row: &postgres::Row, i: usize) -> Result<i64, BadValue> {
    use postgres::types::Type;
    let t = row.columns()[i].type_().clone();
    let read = match t {
        Type::INT8 => row.try_get::<_, Option<i64>>(i),
        Type::INT4 => row.try_get::<_, Option<i32>>(i).map(|v| v.map(i64::from)),
        Type::INT2 => row.try_get::<_, Option<i16>>(i).map(|v| v.map(i64::from)),
        Type::TEXT | Type::VARCHAR => {
            return row
                .try_get::<_, Option<String>>(i)
                .map_err(|e| BadValue::Read(e.to_string()))?
                .ok_or(BadValue::Null)?
                .trim()
                .parse()
                .map_err(|_| BadValue::TextNotInteger);
        }
        other => {
            return Err(BadValue::ColumnType(other.to_string()));
        }
    };
    read.map_err(|e| BadValue::Read(e.to_string()))?
        .ok_or(BadValue::Null)
}

pub(super) fn pg_text(row: &postgres::Row, i: usize) -> Result<String, BadValue> {
    use postgres::types::Type;
    match row.columns()[i].type_().clone() {
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => row
            .try_get::<_, String>(i)
            .map_err(|e| BadValue::Read(e.to_string())),
        Type::UUID => row
            .try_get::<_, PgUuid>(i)
            .map(|u| lockctl_hammer::http::ids::uuid_text(u.0))
            .map_err(|e| BadValue::Read(e.to_string())),
        _ => pg_integer(row, i).map(|n| n.to_string()),
    }
}

pub(super) fn my_integer(row: &mysql::Row, i: usize) -> Result<i64, BadValue> {
    match row.as_ref(i) {
        Some(mysql::Value::Int(n)) => Ok(*n),
        Some(mysql::Value::UInt(n)) => i64::try_from(*n).map_err(|_| BadValue::BeyondI64),
        Some(mysql::Value::Bytes(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or(BadValue::NotInteger),
        Some(mysql::Value::NULL) | None => Err(BadValue::Null),
        Some(other) => Err(BadValue::Other(format!("{other:?}"))),
    }
}

pub(super) fn my_text(row: &mysql::Row, i: usize) -> Result<String, BadValue> {
    match row.as_ref(i) {
        Some(mysql::Value::Bytes(b)) => Ok(String::from_utf8_lossy(b).into_owned()),
        Some(mysql::Value::Int(n)) => Ok(n.to_string()),
        Some(mysql::Value::UInt(n)) => Ok(n.to_string()),
        _ => Err(BadValue::OrderId),
    }
}

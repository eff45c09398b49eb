//! The batched path's asynchronous connection (`batch.rs`): to one server, or to a
//! cluster (each command routed to the node of its keys' slot), and commands sent together
//! on it.

/// An asynchronous connection to one server, or to the cluster (it routes each command to
/// the node of its keys' slot).
#[derive(Clone)]
pub(super) enum AsyncConn {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl redis::aio::ConnectionLike for AsyncConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// Sends `cmds` together: one pipeline to one server (each command's reply or error), each
/// on its own to a cluster's nodes (routed by its keys), all in flight at once. `Err`: the
/// connection failed.
pub(super) async fn send_all<'a>(
    conn: &mut AsyncConn,
    cmds: impl Iterator<Item = &'a redis::Cmd>,
) -> redis::RedisResult<Vec<redis::RedisResult<redis::Value>>> {
    match conn {
        AsyncConn::Single(_) => {
            let mut pipe = redis::pipe();
            for cmd in cmds {
                pipe.add_command(cmd.clone());
            }
            pipe.ignore_errors().query_async(conn).await
        }
        AsyncConn::Cluster(_) => {
            let sends = cmds.map(|cmd| {
                let mut conn = conn.clone();
                async move { cmd.query_async::<redis::Value>(&mut conn).await }
            });
            let replies = futures_util::future::join_all(sends).await;
            // A connection error (not a script's) fails the lot, as on one server.
            if let Some(Err(e)) =
                replies.iter().find(|r| matches!(r, Err(e) if e.is_io_error() || e.is_timeout()))
            {
                return Err(e.clone());
            }
            Ok(replies)
        }
    }
}

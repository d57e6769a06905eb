"""``check_master``: a standalone Spark master is asked for a connection before the JVM
starts (a real listening socket; nothing is faked)."""

from __future__ import annotations

import socket

import pytest

from mysqlcdc.errors import ConfigError, SparkMasterUnreachableError
from mysqlcdc.pipeline.localserver import free_port
from mysqlcdc.spark.session import check_master

pytestmark = pytest.mark.unit


def test_a_listening_master_passes_and_any_of_several_will_do():
    with socket.socket() as master:
        master.bind(("127.0.0.1", 0))
        master.listen()
        port = master.getsockname()[1]
        check_master(f"spark://127.0.0.1:{port}")
        check_master(f"spark://127.0.0.1:{free_port()},127.0.0.1:{port}")   # the standby


def test_no_master_listening_is_named_with_every_address_tried():
    first, second = free_port(), free_port()
    with pytest.raises(SparkMasterUnreachableError) as err:
        check_master(f"spark://127.0.0.1:{first},127.0.0.1:{second}", timeout_s=2)
    assert f"127.0.0.1:{first}" in str(err.value) and f"127.0.0.1:{second}" in str(err.value)
    assert err.value.code == "SPARK_MASTER_UNREACHABLE"


@pytest.mark.parametrize("master", ["spark://host-without-port", "spark://h:port", "spark://:7077"])
def test_a_master_address_without_host_and_port_is_a_config_error(master):
    with pytest.raises(ConfigError):
        check_master(master)


@pytest.mark.parametrize("master", ["local[2]", "local[*]", "yarn", "k8s://https://h:6443"])
def test_other_masters_are_left_to_spark(master):
    check_master(master)

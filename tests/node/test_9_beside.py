"""The Redis module (test_5_redis.py: the real redis-operator, a RedisFailover scaled through its
ScaleAdapter) ran as a pytest session of its own on this session's node, beside the CNPG
modules (tests/node/conftest.py); here its result becomes this session's, and its report and
figures are printed with this session's."""


def test_the_redis_module_passed_beside_the_cnpg_modules(redis_beside):
    code, output = redis_beside.wait()
    assert code == 0, output

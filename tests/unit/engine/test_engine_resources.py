from fractions import Fraction

import pytest

from kueue_domain import resources as res


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        ("10Gi", 10 * 2**30),
        ("1e3", 1000),
        ("100M", 100_000_000),
        ("2Ki", 2048),
        ("0.1", Fraction(1, 10)),
        (".5", Fraction(1, 2)),
        ("-1", -1),
        ("1E-3", Fraction(1, 1000)),
        ("250u", Fraction(250, 10**6)),
        (3, 3),
    ],
)
def test_parse_quantity(text, value):
    assert res.parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "1Xi", "m"])
def test_parse_quantity_rejects_garbage(text):
    with pytest.raises(res.QuantityError):
        res.parse_quantity(text)


@pytest.mark.parametrize(
    ("resource", "text", "amount"),
    [
        ("cpu", "500m", 500),
        ("cpu", "1.5", 1500),
        ("cpu", "100u", 1),  # rounded up to a whole millicore
        ("memory", "10Gi", 10 * 2**30),
        ("memory", "100M", 100_000_000),
        ("memory", "1.5", 2),  # rounded up to a whole byte
        ("nvidia.com/gpu", "1e3", 1000),
    ],
)
def test_quantity_amount(resource, text, amount):
    assert res.quantity_amount(resource, text) == amount


@pytest.mark.parametrize(
    ("resource", "amount", "text"),
    [
        ("cpu", 500, "500m"),
        ("cpu", 1500, "1500m"),
        ("cpu", 2000, "2"),
        ("cpu", 0, "0"),
        ("cpu", 20_000_000, "20k"),
        ("memory", 10 * 2**30, "10Gi"),
        ("memory", 1_000_000, "1M"),
        ("memory", 1536, "1536"),
        ("memory", 512, "512"),
        ("memory", 2_048_000, "2000Ki"),
        ("pods", 3, "3"),
        ("nvidia.com/gpu", 1500, "1500"),
        ("example.com/x", 1_500_000, "1500k"),
    ],
)
def test_format_amount(resource, amount, text):
    assert res.format_amount(resource, amount) == text


def test_round_trip():
    for resource, text in [("cpu", "750m"), ("memory", "64Gi"), ("cpu", "3")]:
        assert res.format_amount(resource, res.quantity_amount(resource, text)) == text


def test_resource_list_arithmetic():
    a = {"cpu": 1000, "memory": 10}
    b = {"cpu": 500, "pods": 1}
    assert res.add(a, b) == {"cpu": 1500, "memory": 10, "pods": 1}
    assert res.sub(a, b) == {"cpu": 500, "memory": 10, "pods": -1}
    assert res.scale(b, 3) == {"cpu": 1500, "pods": 3}
    assert res.maximum(a, b) == {"cpu": 1000, "memory": 10, "pods": 1}
    assert res.resource_list_to_api({"memory": 2**30, "cpu": 250}) == {"cpu": "250m", "memory": "1Gi"}

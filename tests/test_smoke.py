import torch


def test_tensor_round_trip_and_add_match_cpu():
    x = torch.randn(3, 4)
    y = x.foo()
    assert y.device == torch.device("foo", 0)
    torch.testing.assert_close((y + 1).cpu(), x + 1)
